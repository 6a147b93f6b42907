//! Error classes through the real client path: the AWS SDK parses each service's error
//! envelope (EC2's `<Response><Errors><Error>`, ELB's and ELBv2's `<ErrorResponse><Error>`), the
//! shared call path retries and counts, and the provider turns the code into the class the
//! controller acts on. Every test asserts the specific class, cause or counter, because a
//! code the SDK failed to read falls back to the HTTP status and still "is an error".
//!
//! Two sources of error answers: moto (the answers AWS's own protocol serialisers produce, and
//! the conditions moto really enforces) and, for the exact envelopes real AWS sends, a tiny
//! server that answers every request with one fixed body.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{Env, svc};
use kube_lb_annotations::LoadBalancerSpec;
use kube_lb_mock_aws::{FaultPlan, FaultProxy};
use kube_lb_provider_aws::calls::ops;
use kube_lb_provider_aws::{AwsError, AwsProvider, CloudConfig, RetryPolicy};
use kube_lb_provider_core::{EnvironmentCause, LoadBalancerProvider, ProviderError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Two attempts per call, with backoffs short enough for a test.
fn quick_retry(mut config: CloudConfig) -> CloudConfig {
    config.retry = RetryPolicy {
        max_attempts: 2,
        base: Duration::from_millis(5),
        max: Duration::from_millis(10),
    };
    config
}

/// The environment cause of an error, if it is an environment error.
fn cause(error: &ProviderError) -> Option<EnvironmentCause> {
    match error {
        ProviderError::Environment { cause, .. } => Some(*cause),
        _ => None,
    }
}

/// Answers every HTTP request with `status` and `body`, counting the requests: the exact error
/// envelope a real AWS endpoint sends, without moto in between.
struct FixedAnswer {
    addr: SocketAddr,
    requests: Arc<AtomicU32>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FixedAnswer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one HTTP/1.1 request (headers, then `content-length` bytes of body).
async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<()> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let headers = String::from_utf8_lossy(&buffer[..header_end]).to_ascii_lowercase();
    let length: usize = headers
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0);
    while buffer.len() < header_end + length {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    Some(())
}

impl FixedAnswer {
    async fn start(status: u16, body: &'static str) -> FixedAnswer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicU32::new(0));
        let counted = requests.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    if read_request(&mut stream).await.is_none() {
                        return;
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    let answer = format!(
                        "HTTP/1.1 {status} Error\r\ncontent-type: text/xml\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        FixedAnswer {
            addr,
            requests,
            task,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn requests(&self) -> u32 {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Which service's client makes the call: the SDK picks the error parser by service.
#[derive(Debug, Clone, Copy)]
enum Service {
    Ec2,
    Elb,
    Elbv2,
}

/// One describe call of `service` through the provider's shared call path.
async fn describe(provider: &AwsProvider, service: Service) -> AwsError {
    let clients = provider.clients();
    let result = match service {
        Service::Ec2 => clients
            .calls
            .run(ops::DESCRIBE_VPCS, || clients.ec2.describe_vpcs().send())
            .await
            .map(drop),
        Service::Elb => clients
            .calls
            .run(ops::ELB_DESCRIBE_LOAD_BALANCERS, || {
                clients.elb.describe_load_balancers().send()
            })
            .await
            .map(drop),
        Service::Elbv2 => clients
            .calls
            .run(ops::V2_DESCRIBE_LOAD_BALANCERS, || {
                clients.elbv2.describe_load_balancers().send()
            })
            .await
            .map(drop),
    };
    result.expect_err("the fixed answer is an error")
}

const EC2_UNAUTHORIZED: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error>\
    <Code>UnauthorizedOperation</Code><Message>You are not authorized to perform this operation. \
    Encoded authorization failure message: abc</Message></Error></Errors>\
    <RequestID>3f7a</RequestID></Response>";
const EC2_THROTTLED: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error>\
    <Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors>\
    <RequestID>3f7b</RequestID></Response>";
const EC2_SG_QUOTA: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error>\
    <Code>SecurityGroupLimitExceeded</Code><Message>The maximum number of security groups \
    has been reached.</Message></Error></Errors><RequestID>3f7c</RequestID></Response>";
const EC2_GROUP_MISSING: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error>\
    <Code>InvalidGroup.NotFound</Code><Message>The security group 'sg-1' does not exist\
    </Message></Error></Errors><RequestID>3f7d</RequestID></Response>";
const ELB_THROTTLED: &str = "<ErrorResponse xmlns=\"http://elasticloadbalancing.amazonaws.com/doc/2012-06-01/\">\
    <Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message></Error>\
    <RequestId>3f7e</RequestId></ErrorResponse>";
const ELB_ACCESS_DENIED: &str = "<ErrorResponse xmlns=\"http://elasticloadbalancing.amazonaws.com/doc/2012-06-01/\">\
    <Error><Type>Sender</Type><Code>AccessDenied</Code><Message>User: arn:aws:iam::1:user/x is \
    not authorized to perform: elasticloadbalancing:DescribeLoadBalancers</Message></Error>\
    <RequestId>3f7f</RequestId></ErrorResponse>";
const ELB_QUOTA: &str = "<ErrorResponse xmlns=\"http://elasticloadbalancing.amazonaws.com/doc/2012-06-01/\">\
    <Error><Type>Sender</Type><Code>TooManyLoadBalancers</Code><Message>Exceeded quota of \
    account 1</Message></Error><RequestId>3f80</RequestId></ErrorResponse>";
const ELB_DEPENDENCY_THROTTLED: &str = "<ErrorResponse xmlns=\"http://elasticloadbalancing.amazonaws.com/doc/2012-06-01/\">\
    <Error><Type>Sender</Type><Code>DependencyThrottle</Code><Message>Rate exceeded</Message>\
    </Error><RequestId>3f83</RequestId></ErrorResponse>";
const ELBV2_INVALID_SCHEME: &str = "<ErrorResponse xmlns=\"http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/\">\
    <Error><Type>Sender</Type><Code>InvalidScheme</Code><Message>The requested scheme is not \
    valid</Message></Error><RequestId>3f84</RequestId></ErrorResponse>";
const ELBV2_NOT_FOUND: &str = "<ErrorResponse xmlns=\"http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/\">\
    <Error><Type>Sender</Type><Code>LoadBalancerNotFound</Code><Message>One or more load \
    balancers not found</Message></Error><RequestId>3f81</RequestId></ErrorResponse>";
const ELBV2_QUOTA: &str = "<ErrorResponse xmlns=\"http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/\">\
    <Error><Type>Sender</Type><Code>TooManyTargetGroups</Code><Message>You have reached the \
    maximum number of target groups</Message></Error><RequestId>3f82</RequestId></ErrorResponse>";

/// One fixed error answer and what the provider must make of it.
struct Case {
    /// Whose client calls (and so whose error parser reads the answer).
    service: Service,
    status: u16,
    body: &'static str,
    /// The code the SDK must read from the body.
    code: &'static str,
    /// The converted error's class.
    class: &'static str,
    cause: Option<EnvironmentCause>,
    /// Retried in place, counted as throttled, and converted to `Throttled`.
    throttled: bool,
}

/// The envelopes real AWS answers with keep their code through the SDK, the shared call path
/// and the conversion: a throttle is `Throttled`, retried and counted as throttled; a quota, a
/// refused permission and a missing group each get their cause; a missing load balancer keeps
/// the code the call sites test for "absent".
#[tokio::test]
async fn real_aws_error_envelopes_keep_their_codes() {
    use EnvironmentCause::*;
    let cases = [
        Case {
            service: Service::Ec2,
            status: 403,
            body: EC2_UNAUTHORIZED,
            code: "UnauthorizedOperation",
            class: "environment",
            cause: Some(PermissionDenied),
            throttled: false,
        },
        Case {
            service: Service::Ec2,
            status: 503,
            body: EC2_THROTTLED,
            code: "RequestLimitExceeded",
            class: "retryable",
            cause: None,
            throttled: true,
        },
        Case {
            service: Service::Ec2,
            status: 400,
            body: EC2_SG_QUOTA,
            code: "SecurityGroupLimitExceeded",
            class: "environment",
            cause: Some(Quota),
            throttled: false,
        },
        Case {
            service: Service::Ec2,
            status: 400,
            body: EC2_GROUP_MISSING,
            code: "InvalidGroup.NotFound",
            class: "environment",
            cause: Some(MissingDependency),
            throttled: false,
        },
        Case {
            service: Service::Elb,
            status: 400,
            body: ELB_THROTTLED,
            code: "Throttling",
            class: "retryable",
            cause: None,
            throttled: true,
        },
        Case {
            service: Service::Elb,
            status: 403,
            body: ELB_ACCESS_DENIED,
            code: "AccessDenied",
            class: "environment",
            cause: Some(PermissionDenied),
            throttled: false,
        },
        Case {
            service: Service::Elb,
            status: 400,
            body: ELB_QUOTA,
            code: "TooManyLoadBalancers",
            class: "environment",
            cause: Some(Quota),
            throttled: false,
        },
        Case {
            service: Service::Elb,
            status: 400,
            body: ELB_DEPENDENCY_THROTTLED,
            code: "DependencyThrottle",
            class: "retryable",
            cause: None,
            throttled: true,
        },
        Case {
            service: Service::Elbv2,
            status: 400,
            body: ELBV2_INVALID_SCHEME,
            code: "InvalidScheme",
            class: "user",
            cause: None,
            throttled: false,
        },
        Case {
            service: Service::Elbv2,
            status: 400,
            body: ELBV2_QUOTA,
            code: "TooManyTargetGroups",
            class: "environment",
            cause: Some(Quota),
            throttled: false,
        },
    ];
    for Case {
        service,
        status,
        body,
        code,
        class,
        cause: want_cause,
        throttled,
    } in cases
    {
        let what = format!("{service:?} {code}");
        let server = FixedAnswer::start(status, body).await;
        let sdk = common::sdk_config(&server.endpoint()).await;
        let provider = AwsProvider::new(&sdk, quick_retry(CloudConfig::default()), common::CLUSTER);
        let error = describe(&provider, service).await;
        assert_eq!(error.code(), Some(code), "{what}: {error}");
        let attempts = server.requests();
        // Only passing failures are repeated in place; each attempt is counted once.
        assert_eq!(attempts, if throttled { 2 } else { 1 }, "{what}");
        let counter = provider.call_counter();
        assert_eq!(counter.snapshot().total(), u64::from(attempts), "{what}");
        let counted_throttled: u64 = counter.throttled().values().sum();
        let want_throttled = if throttled { u64::from(attempts) } else { 0 };
        assert_eq!(counted_throttled, want_throttled, "{what}");

        let converted = ProviderError::from(error);
        assert_eq!(converted.class(), class, "{what}: {converted}");
        assert_eq!(cause(&converted), want_cause, "{what}: {converted}");
        assert_eq!(
            matches!(converted, ProviderError::Throttled { .. }),
            throttled,
            "{what}: {converted:?}"
        );
    }

    // ELBv2's "not found" keeps its code: call sites read it as "absent", not as a failure.
    let server = FixedAnswer::start(400, ELBV2_NOT_FOUND).await;
    let sdk = common::sdk_config(&server.endpoint()).await;
    let provider = AwsProvider::new(&sdk, quick_retry(CloudConfig::default()), common::CLUSTER);
    let error = describe(&provider, Service::Elbv2).await;
    assert!(error.has_code(&["LoadBalancerNotFound"]), "{error}");
    assert_eq!(server.requests(), 1, "not retried in place");
}

/// Throttled on every attempt (EC2 `RequestLimitExceeded` with 503, ELB `Throttling` with
/// 400, from the fault proxy in front of moto): each call uses up its retry budget, every
/// attempt is counted as throttled, and the error the controller sees is `Throttled`, so the
/// Service's condition says `CloudThrottled`.
#[tokio::test]
async fn throttling_past_the_retry_budget_is_reported_as_throttled() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.moto.addr(), FaultPlan::ThrottleEvery(1))
        .await
        .unwrap();
    let sdk = common::sdk_config(&proxy.endpoint()).await;
    let provider = AwsProvider::new(&sdk, quick_retry(env.config()), common::CLUSTER);
    for service in [Service::Ec2, Service::Elb, Service::Elbv2] {
        let before = proxy.seen().len();
        let throttled_before: u64 = provider.call_counter().throttled().values().sum();
        let error = ProviderError::from(describe(&provider, service).await);
        assert!(
            matches!(error, ProviderError::Throttled { .. }),
            "{service:?}: {error:?}"
        );
        assert!(error.is_transient(), "{service:?}");
        let attempts = proxy.seen().len() - before;
        assert_eq!(attempts, 2, "{service:?}: retried in place once");
        let throttled: u64 = provider.call_counter().throttled().values().sum();
        assert_eq!(
            throttled - throttled_before,
            attempts as u64,
            "{service:?}: every throttled answer counted"
        );
    }

    // The same through a whole `ensure`: the first call is throttled past its budget and the
    // Service's error is the throttle, not a permission or internal error.
    let spec = svc("web", "30000000-0000-0000-0000-000000000003")
        .port("http", 80, 30080, "TCP")
        .spec();
    let error = provider
        .ensure(&spec, &env.nodes(&env.instances))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ProviderError::Throttled { .. }),
        "{error:?}"
    );
}

/// The two kinds of load balancer a refusal is checked on: a Classic ELB and an NLB, with UIDs
/// of their own per test (`first`, `second`).
fn clb_and_nlb(first: &str, second: &str) -> [(&'static str, LoadBalancerSpec); 2] {
    [
        (
            "CLB",
            svc("web", first).port("http", 80, 30080, "TCP").spec(),
        ),
        (
            "NLB",
            svc("api", second)
                .port("tcp", 443, 30443, "TCP")
                .aws("type", "nlb")
                .spec(),
        ),
    ]
}

/// AWS refuses `CreateLoadBalancer` with `code` (injected by the fault proxy in front of moto,
/// in the ELB/ELBv2 envelope): for a Classic ELB and for an NLB the ensure fails with
/// `expected`, refused once each (an environment error is not retried in place). Returns the
/// environment for checks of its own.
async fn create_refused_with(
    code: &'static str,
    expected: EnvironmentCause,
    uids: (&str, &str),
) -> Env {
    let env = Env::start().await;
    let proxy = FaultProxy::start(
        env.moto.addr(),
        FaultPlan::Refuse {
            action: "CreateLoadBalancer",
            code,
        },
    )
    .await
    .unwrap();
    let sdk = common::sdk_config(&proxy.endpoint()).await;
    let provider = AwsProvider::new(&sdk, quick_retry(env.config()), common::CLUSTER);
    for (what, spec) in clb_and_nlb(uids.0, uids.1) {
        let error = provider
            .ensure(&spec, &env.nodes(&env.instances))
            .await
            .unwrap_err();
        assert_eq!(cause(&error), Some(expected), "{code} on a {what}: {error}");
        assert!(
            error.to_string().contains("CreateLoadBalancer"),
            "{code} on a {what}: {error}"
        );
    }
    let refused = proxy
        .seen()
        .iter()
        .filter(|s| s.injected && s.action == "CreateLoadBalancer")
        .count();
    assert_eq!(refused, 2, "{code}: one refusal each, not retried in place");
    env
}

/// AWS refuses to create another load balancer (`TooManyLoadBalancers`), for a Classic ELB and
/// an NLB, and moto refuses a security group with more rules than a VPC group may hold
/// (`RulesPerSecurityGroupLimitExceeded`, EC2's envelope): each is a quota, which the controller
/// reports as an environment problem and retries with capped backoff, not a user error.
#[tokio::test]
async fn quota_refusals_are_environment_quota_errors() {
    let env = create_refused_with(
        "TooManyLoadBalancers",
        EnvironmentCause::Quota,
        (
            "40000000-0000-0000-0000-000000000004",
            "50000000-0000-0000-0000-000000000005",
        ),
    )
    .await;

    // 61 source ranges need 61 rules on the load balancer's own group; a VPC group holds 60.
    let mut crowded =
        svc("crowded", "60000000-0000-0000-0000-000000000006").port("http", 80, 30081, "TCP");
    for host in 1..=61 {
        crowded = crowded.source_range(&format!("198.51.100.{host}/32"));
    }
    let direct = env.provider(quick_retry(env.config()));
    let error = direct
        .ensure(&crowded.spec(), &env.nodes(&env.instances))
        .await
        .unwrap_err();
    assert_eq!(cause(&error), Some(EnvironmentCause::Quota), "{error}");
    assert!(
        error
            .to_string()
            .contains("RulesPerSecurityGroupLimitExceeded"),
        "{error}"
    );
}

/// The controller's identity may not create load balancers (`AccessDenied`): a permission
/// problem for the operator, reported as such, for both load-balancer kinds.
#[tokio::test]
async fn permission_refusals_are_environment_permission_errors() {
    create_refused_with(
        "AccessDenied",
        EnvironmentCause::PermissionDenied,
        (
            "70000000-0000-0000-0000-000000000007",
            "80000000-0000-0000-0000-000000000008",
        ),
    )
    .await;
}

/// A load balancer someone else already deleted: moto answers `LoadBalancerNotFound` (ELB and
/// ELBv2 envelopes), the provider reads it as "absent" and still removes what it owns around
/// it; deleting again is a no-op. A security group already gone keeps EC2's
/// `InvalidGroup.NotFound`, the code the delete path tolerates.
#[tokio::test]
async fn not_found_while_deleting_is_tolerated() {
    let env = Env::start().await;
    let provider = env.provider(quick_retry(env.config()));
    let [(_, clb), (_, nlb)] = clb_and_nlb(
        "90000000-0000-0000-0000-000000000009",
        "a0000000-0000-0000-0000-00000000000a",
    );
    let nodes = env.nodes(&env.instances);
    provider.ensure(&clb, &nodes).await.unwrap();
    provider.ensure(&nlb, &nodes).await.unwrap();
    assert!(!provider.owned_resources().await.unwrap().is_empty());

    // Out of band: the Classic ELB and the NLB are deleted behind the provider's back.
    let clb_name =
        kube_lb_provider_core::naming::load_balancer_name("90000000-0000-0000-0000-000000000009");
    env.elb
        .delete_load_balancer()
        .load_balancer_name(&clb_name)
        .send()
        .await
        .unwrap();
    let nlbs = env.elbv2.describe_load_balancers().send().await.unwrap();
    for lb in nlbs.load_balancers() {
        env.elbv2
            .delete_load_balancer()
            .load_balancer_arn(lb.load_balancer_arn().unwrap())
            .send()
            .await
            .unwrap();
    }

    for spec in [&clb, &nlb] {
        provider.delete(&spec.service).await.unwrap();
        assert!(provider.status(&spec.service).await.unwrap().is_none());
        provider.delete(&spec.service).await.unwrap();
    }
    let left = provider.owned_resources().await.unwrap();
    assert!(left.is_empty(), "nothing owned is left: {left:?}");

    // EC2's not-found for a group keeps its code through the client path.
    let clients = provider.clients();
    let error = clients
        .calls
        .run(ops::DELETE_SECURITY_GROUP, || {
            clients
                .ec2
                .delete_security_group()
                .group_id("sg-0123456789abcdef0")
                .send()
        })
        .await
        .unwrap_err();
    assert!(error.has_code(&["InvalidGroup.NotFound"]), "{error}");
}

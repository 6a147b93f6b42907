//! Idempotent creates, owner clashes and kind changes under faults, against moto behind the
//! fault proxy: a response lost after the call took effect must be recognised on the retry
//! (found by name and tags, adopted), a same-named resource of someone else is an error naming
//! the owner, and a change of load-balancer kind stopped after any of its changes (as a kill
//! would stop it) converges on the next run to exactly one load balancer of the new kind.
//!
//! Each table case uses its own Service in one moto account; a restarted controller is a new
//! `AwsProvider` (nothing cached).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;

use aws_config::SdkConfig;
use aws_sdk_elasticloadbalancing::types as elb;
use aws_sdk_elasticloadbalancingv2::types as v2;
use common::{CLUSTER, CLUSTER_TAG, Env, Meter, Svc, sdk_config, svc};
use kube_lb_annotations::LoadBalancerSpec;
use kube_lb_mock_aws::{FaultPlan, FaultProxy, LoseResponse};
use kube_lb_provider_aws::AwsProvider;
use kube_lb_provider_aws::naming::target_group_prefix;
use kube_lb_provider_aws::sg::RuleSource;
use kube_lb_provider_core::naming::load_balancer_name;
use kube_lb_provider_core::{LoadBalancerProvider, ProviderError};

/// moto behind the fault proxy, and providers that talk through it.
struct Faulty {
    proxy: FaultProxy,
    sdk: SdkConfig,
}

impl Faulty {
    async fn start(env: &Env) -> Faulty {
        let proxy = FaultProxy::start(env.moto.addr(), FaultPlan::None)
            .await
            .unwrap();
        let sdk = sdk_config(&proxy.endpoint()).await;
        Faulty { proxy, sdk }
    }

    /// A provider as after a controller restart: nothing remembered.
    fn restarted(&self, env: &Env) -> AwsProvider {
        AwsProvider::new(&self.sdk, env.config(), CLUSTER)
    }
}

fn uid(n: usize) -> String {
    // The load-balancer name keeps the first 31 hex digits: vary the leading ones.
    format!("{n:08}-0000-4000-8000-5e1f00000000")
}

fn service(n: usize, kind: &str) -> Svc {
    let base = svc(&format!("svc{n}"), &uid(n)).port("tcp", 80, 30080, "TCP");
    match kind {
        "clb" => base,
        "clb-internal" => base.aws("internal", "true"),
        "nlb" => base.aws("type", "nlb"),
        "nlb-internal" => base.aws("type", "nlb").aws("internal", "true"),
        other => panic!("unknown kind {other}"),
    }
}

/// What AWS holds for one Service (the node group is shared by the cases, which each delete
/// their Service at the end, so its rules are this Service's).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Inventory {
    clbs: usize,
    nlbs: usize,
    internal: bool,
    lb_groups: usize,
    target_groups: usize,
    listeners: usize,
    clb_rules_on_nodes: usize,
    nlb_rules_on_nodes: usize,
    /// The ownership tags on the load balancer (cluster and service name).
    owner_tags: BTreeMap<String, String>,
}

impl Inventory {
    /// One load balancer of `kind` for a one-port Service, nothing of the other kind.
    fn expected(spec: &LoadBalancerSpec, kind: &str) -> Inventory {
        let owner_tags = BTreeMap::from([
            (CLUSTER_TAG.to_string(), "owned".to_string()),
            (
                "kubernetes.io/service-name".to_string(),
                spec.service.to_string(),
            ),
        ]);
        let nlb = kind.starts_with("nlb");
        Inventory {
            clbs: usize::from(!nlb),
            nlbs: usize::from(nlb),
            internal: kind.ends_with("internal"),
            lb_groups: usize::from(!nlb),
            target_groups: usize::from(nlb),
            listeners: 1,
            clb_rules_on_nodes: usize::from(!nlb),
            // client + MTU rules for 0.0.0.0/0 on the traffic port
            nlb_rules_on_nodes: if nlb { 2 } else { 0 },
            owner_tags,
        }
    }
}

fn owner_tags<'a>(tags: impl Iterator<Item = (&'a str, &'a str)>) -> BTreeMap<String, String> {
    tags.filter(|(k, _)| *k == CLUSTER_TAG || *k == "kubernetes.io/service-name")
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn inventory(env: &Env, spec: &LoadBalancerSpec) -> Inventory {
    let name = load_balancer_name(&spec.service.uid);
    let mut inv = Inventory::default();
    let clbs = env.elb.describe_load_balancers().send().await.unwrap();
    for lb in clbs.load_balancer_descriptions() {
        if lb.load_balancer_name() == Some(name.as_str()) {
            inv.clbs += 1;
            inv.internal = lb.scheme() == Some("internal");
            inv.listeners += lb.listener_descriptions().len();
            let tags = env
                .elb
                .describe_tags()
                .load_balancer_names(&name)
                .send()
                .await
                .unwrap();
            inv.owner_tags = owner_tags(
                tags.tag_descriptions()
                    .iter()
                    .flat_map(|d| d.tags())
                    .map(|t| (t.key(), t.value().unwrap_or(""))),
            );
        }
    }
    let nlbs = env.elbv2.describe_load_balancers().send().await.unwrap();
    for lb in nlbs.load_balancers() {
        if lb.load_balancer_name() == Some(name.as_str()) {
            inv.nlbs += 1;
            inv.internal = lb.scheme() == Some(&v2::LoadBalancerSchemeEnum::Internal);
            let arn = lb.load_balancer_arn().unwrap();
            let listeners = env
                .elbv2
                .describe_listeners()
                .load_balancer_arn(arn)
                .send()
                .await
                .unwrap();
            inv.listeners += listeners.listeners().len();
            let tags = env
                .elbv2
                .describe_tags()
                .resource_arns(arn)
                .send()
                .await
                .unwrap();
            inv.owner_tags = owner_tags(
                tags.tag_descriptions()
                    .iter()
                    .flat_map(|d| d.tags())
                    .map(|t| (t.key().unwrap_or(""), t.value().unwrap_or(""))),
            );
        }
    }
    inv.lb_groups = env.groups_named(&format!("k8s-elb-{name}")).await.len();
    let prefix = target_group_prefix(&spec.service);
    inv.target_groups = env
        .target_group_names()
        .await
        .iter()
        .filter(|n| n.starts_with(&prefix))
        .count();
    for rule in env.rules(&env.node_sg).await {
        if matches!(rule.source, RuleSource::Group(_)) {
            inv.clb_rules_on_nodes += 1;
        }
        if rule
            .description
            .as_deref()
            .is_some_and(|d| d.ends_with(&format!("={name}")))
        {
            inv.nlb_rules_on_nodes += 1;
        }
    }
    inv
}

/// Ensures until it succeeds (a fresh provider each time, as after a restart), at most 3 times.
async fn converge(env: &Env, faulty: &Faulty, spec: &LoadBalancerSpec) {
    let mut errors = Vec::new();
    for _ in 0..3 {
        match faulty
            .restarted(env)
            .ensure(spec, &env.nodes(&env.instances))
            .await
        {
            Ok(_) => return,
            Err(e) => errors.push(e.to_string()),
        }
    }
    panic!("{} did not converge: {errors:?}", spec.service);
}

/// After convergence a restarted provider has nothing left to change.
async fn assert_converged(env: &Env, faulty: &Faulty, spec: &LoadBalancerSpec, case: &str) {
    let provider = faulty.restarted(env);
    let meter = Meter::new(&provider);
    provider
        .ensure(spec, &env.nodes(&env.instances))
        .await
        .unwrap_or_else(|e| panic!("{case}: resync failed: {e}"));
    let resync = meter.take();
    assert_eq!(resync.mutations(), 0, "{case}: {resync:?}");
}

/// The Service has exactly `kind`'s resources and a restarted controller's resync changes
/// nothing; its delete then leaves nothing behind.
async fn assert_converged_then_deleted(
    env: &Env,
    faulty: &Faulty,
    spec: &LoadBalancerSpec,
    kind: &str,
    case: &str,
) {
    assert_eq!(
        inventory(env, spec).await,
        Inventory::expected(spec, kind),
        "{case}"
    );
    assert_converged(env, faulty, spec, case).await;
    faulty.restarted(env).delete(&spec.service).await.unwrap();
    assert_eq!(
        inventory(env, spec).await,
        Inventory::default(),
        "{case}: delete left something"
    );
}

#[tokio::test]
async fn a_lost_response_to_any_create_or_change_is_recognised_on_the_retry() {
    let env = Env::start().await;
    let faulty = Faulty::start(&env).await;
    // (kind, a change made after the first convergence or none, action whose first response
    // is lost after it took effect: during the create, or during the change)
    type Change = Option<fn(usize, &str) -> Svc>;
    let tags: Change = Some(|n, kind| service(n, kind).aws("additional-resource-tags", "team=a"));
    let proxy_protocol: Change = Some(|n, kind| service(n, kind).aws("proxy-protocol", "*"));
    let node_port: Change = Some(|n, kind| {
        let moved = svc(&format!("svc{n}"), &uid(n)).port("tcp", 80, 30081, "TCP");
        if kind == "nlb" {
            moved.aws("type", "nlb")
        } else {
            moved
        }
    });
    let cases: [(&str, Change, &str); 16] = [
        ("clb", None, "CreateSecurityGroup"),
        ("clb", None, "AuthorizeSecurityGroupIngress"),
        ("clb", None, "CreateLoadBalancer"),
        ("clb", None, "ConfigureHealthCheck"),
        ("clb", None, "RegisterInstancesWithLoadBalancer"),
        ("clb", tags, "AddTags"),
        ("clb", proxy_protocol, "CreateLoadBalancerPolicy"),
        ("nlb", None, "CreateLoadBalancer"),
        ("nlb", None, "CreateTargetGroup"),
        ("nlb", None, "CreateListener"),
        ("nlb", None, "RegisterTargets"),
        ("nlb", None, "AuthorizeSecurityGroupIngress"),
        ("nlb", tags, "AddTags"),
        // A new node port needs a new target group: created, the listener moved onto it, the
        // old one deleted.
        ("nlb", node_port, "CreateTargetGroup"),
        ("nlb", node_port, "ModifyListener"),
        ("nlb", node_port, "DeleteTargetGroup"),
    ];
    for (n, (kind, change, action)) in cases.into_iter().enumerate() {
        let case = format!("{kind} {action}");
        let mut spec = service(n, kind).spec();
        if let Some(change) = change {
            converge(&env, &faulty, &spec).await;
            spec = change(n, kind).spec();
        }
        faulty
            .proxy
            .set_plan(FaultPlan::LoseResponse(LoseResponse::once(action)));
        converge(&env, &faulty, &spec).await;
        faulty.proxy.set_plan(FaultPlan::None);
        assert_eq!(
            faulty.proxy.lost().len(),
            n + 1,
            "{case}: the response was lost"
        );
        assert_eq!(faulty.proxy.lost().last().map(String::as_str), Some(action));
        assert_converged_then_deleted(&env, &faulty, &spec, kind, &case).await;
    }
}

#[tokio::test]
async fn lost_delete_responses_still_delete_everything() {
    let env = Env::start().await;
    let faulty = Faulty::start(&env).await;
    let cases = [
        ("clb", "DeleteLoadBalancer"),
        ("clb", "DeleteSecurityGroup"),
        ("clb", "RevokeSecurityGroupIngress"),
        ("nlb", "DeleteLoadBalancer"),
        ("nlb", "DeleteListener"),
        ("nlb", "DeleteTargetGroup"),
        ("nlb", "RevokeSecurityGroupIngress"),
    ];
    for (n, (kind, action)) in cases.into_iter().enumerate() {
        let case = format!("{kind} {action}");
        let spec = service(n, kind).spec();
        converge(&env, &faulty, &spec).await;
        faulty
            .proxy
            .set_plan(FaultPlan::LoseResponse(LoseResponse::once(action)));
        let mut result = faulty.restarted(&env).delete(&spec.service).await;
        if result.is_err() {
            result = faulty.restarted(&env).delete(&spec.service).await;
        }
        faulty.proxy.set_plan(FaultPlan::None);
        assert!(result.is_ok(), "{case}: {result:?}");
        assert_eq!(faulty.proxy.lost().len(), n + 1, "{case}: nothing lost");
        assert_eq!(inventory(&env, &spec).await, Inventory::default(), "{case}");
    }
}

fn foreign_tags() -> [(&'static str, &'static str); 2] {
    [
        ("kubernetes.io/cluster/other", "owned"),
        ("kubernetes.io/service-name", "shop/cart"),
    ]
}

async fn foreign_clb(env: &Env, name: &str) {
    env.elb
        .create_load_balancer()
        .load_balancer_name(name)
        .listeners(
            elb::Listener::builder()
                .protocol("TCP")
                .load_balancer_port(80)
                .instance_protocol("TCP")
                .instance_port(31000)
                .build()
                .unwrap(),
        )
        .subnets(&env.subnets[0])
        .set_tags(Some(
            foreign_tags()
                .iter()
                .map(|(k, v)| elb::Tag::builder().key(*k).value(*v).build().unwrap())
                .collect(),
        ))
        .send()
        .await
        .unwrap();
}

async fn foreign_nlb(env: &Env, name: &str) {
    env.elbv2
        .create_load_balancer()
        .name(name)
        .r#type(v2::LoadBalancerTypeEnum::Network)
        .subnets(&env.subnets[0])
        .set_tags(Some(
            foreign_tags()
                .iter()
                .map(|(k, v)| v2::Tag::builder().key(*k).value(*v).build())
                .collect(),
        ))
        .send()
        .await
        .unwrap();
}

async fn foreign_group(env: &Env, name: &str) {
    env.ec2
        .create_security_group()
        .group_name(format!("k8s-elb-{name}"))
        .description("someone else's")
        .vpc_id(&env.vpc)
        .tag_specifications(
            aws_sdk_ec2::types::TagSpecification::builder()
                .resource_type(aws_sdk_ec2::types::ResourceType::SecurityGroup)
                .tags(
                    aws_sdk_ec2::types::Tag::builder()
                        .key("kubernetes.io/cluster/other")
                        .value("owned")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_same_named_resource_of_another_owner_is_name_taken_and_left_alone() {
    let env = Env::start().await;
    let provider = env.provider(env.config());
    // (what exists with our name, the kind the Service asks for, words the error must contain)
    let cases = [
        ("clb", "clb", "Service shop/cart of cluster other"),
        ("nlb", "nlb", "Service shop/cart of cluster other"),
        ("clb", "nlb", "Service shop/cart of cluster other"),
        ("nlb", "clb", "Service shop/cart of cluster other"),
        ("group", "clb", "cluster other"),
    ];
    for (n, (existing, kind, owner)) in cases.into_iter().enumerate() {
        let case = format!("{existing} exists, {kind} wanted");
        let spec = service(n, kind).spec();
        let name = load_balancer_name(&spec.service.uid);
        match existing {
            "clb" => foreign_clb(&env, &name).await,
            "nlb" => foreign_nlb(&env, &name).await,
            _ => foreign_group(&env, &name).await,
        }
        let before = inventory(&env, &spec).await;
        let error = provider
            .ensure(&spec, &env.nodes(&env.instances))
            .await
            .unwrap_err();
        match &error {
            ProviderError::OwnedElsewhere { owner: named, .. } => {
                assert!(named.contains(owner), "{case}: {error}");
                assert!(error.to_string().contains(&name), "{case}: {error}");
                assert_eq!(error.class(), "user", "{case}: a user error");
            }
            other => panic!("{case}: want OwnedElsewhere, got {other:?}"),
        }
        assert!(
            !error.is_retryable(),
            "{case}: a user error waits for the Service to change"
        );
        assert_eq!(inventory(&env, &spec).await, before, "{case}: touched");
        provider.delete(&spec.service).await.unwrap();
        assert_eq!(
            inventory(&env, &spec).await,
            before,
            "{case}: delete removed someone else's resource"
        );
    }
}

#[tokio::test]
async fn a_kind_change_stopped_after_any_step_converges_to_one_load_balancer() {
    let env = Env::start().await;
    let faulty = Faulty::start(&env).await;
    let mut n = 0;
    for (from, to) in [
        ("clb", "nlb"),
        ("nlb", "clb"),
        ("nlb", "nlb-internal"),
        ("clb", "clb-internal"),
    ] {
        let mut steps = 0;
        for stop_after in 0..40 {
            n += 1;
            let case = format!("{from}→{to} stopped after {stop_after} changes");
            let before = service(n, from).spec();
            let after = service(n, to).spec();
            converge(&env, &faulty, &before).await;
            assert_eq!(
                inventory(&env, &before).await,
                Inventory::expected(&before, from),
                "{case}: start"
            );
            faulty
                .proxy
                .set_plan(FaultPlan::StopAfterMutations(stop_after));
            let stopped = faulty
                .restarted(&env)
                .ensure(&after, &env.nodes(&env.instances))
                .await;
            faulty.proxy.set_plan(FaultPlan::None);
            // Never two load balancers for one Service, even mid-change.
            let mid = inventory(&env, &after).await;
            assert!(mid.clbs + mid.nlbs <= 1, "{case}: {mid:?}");

            converge(&env, &faulty, &after).await;
            assert_converged_then_deleted(&env, &faulty, &after, to, &case).await;
            if stopped.is_ok() {
                steps = stop_after;
                break;
            }
        }
        assert!(steps >= 3, "{from}→{to}: only {steps} changes interrupted");
    }
}

/// The listeners of the Service's NLB: (port, target group it forwards to).
async fn nlb_listeners(env: &Env, spec: &LoadBalancerSpec) -> Vec<(i32, String)> {
    let name = load_balancer_name(&spec.service.uid);
    let lb = env.nlb(&name).await;
    let arn = lb.load_balancer_arn().unwrap();
    let listeners = env
        .elbv2
        .describe_listeners()
        .load_balancer_arn(arn)
        .send()
        .await
        .unwrap();
    let mut out: Vec<(i32, String)> = listeners
        .listeners()
        .iter()
        .map(|l| {
            let target = l
                .default_actions()
                .iter()
                .find_map(|a| a.target_group_arn())
                .unwrap_or_default();
            (l.port().unwrap_or_default(), target.to_string())
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_refused_listener_change_leaves_the_port_served_and_converges_once_allowed() {
    let env = Env::start().await;
    let faulty = Faulty::start(&env).await;
    let n = 40;
    let spec = service(n, "nlb").spec();
    converge(&env, &faulty, &spec).await;
    let before = nlb_listeners(&env, &spec).await;
    assert_eq!(before.len(), 1, "{before:?}");
    // A new node port needs a new target group and the listener moved onto it.
    let moved = svc(&format!("svc{n}"), &uid(n))
        .port("tcp", 80, 30081, "TCP")
        .aws("type", "nlb")
        .spec();
    faulty.proxy.set_plan(FaultPlan::Refuse {
        action: "ModifyListener",
        code: "ValidationError",
    });
    for attempt in 0..2 {
        let error = faulty
            .restarted(&env)
            .ensure(&moved, &env.nodes(&env.instances))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, ProviderError::User { message } if message.contains("ModifyListener")),
            "attempt {attempt}: {error:?}"
        );
        // The port keeps its listener, still forwarding to the target group it had.
        assert_eq!(
            nlb_listeners(&env, &spec).await,
            before,
            "attempt {attempt}"
        );
        let prefix = target_group_prefix(&spec.service);
        let groups = env.target_group_names().await;
        let ours = groups.iter().filter(|n| n.starts_with(&prefix)).count();
        assert!(
            ours <= 2,
            "attempt {attempt}: a retry made another target group: {groups:?}"
        );
    }
    faulty.proxy.set_plan(FaultPlan::None);
    converge(&env, &faulty, &moved).await;
    let after = nlb_listeners(&env, &moved).await;
    assert_eq!(after.len(), 1, "{after:?}");
    assert_ne!(after, before, "the listener moved to the new target group");
    assert_eq!(
        inventory(&env, &moved).await,
        Inventory::expected(&moved, "nlb"),
        "the old target group is gone once the listener moved"
    );
    assert_converged(&env, &faulty, &moved, "refused ModifyListener").await;
    faulty.restarted(&env).delete(&moved.service).await.unwrap();
    assert_eq!(inventory(&env, &moved).await, Inventory::default());
}

#[tokio::test]
async fn garbled_cloud_answers_are_errors_not_panics_and_converge_afterwards() {
    let env = Env::start().await;
    let faulty = Faulty::start(&env).await;
    // (kind, action whose every answer is replaced by a body that is not the API's XML; the
    // call itself reached moto and took effect where it mutates)
    let cases = [
        ("clb", "DescribeLoadBalancers"),
        ("clb", "CreateSecurityGroup"),
        ("clb", "AuthorizeSecurityGroupIngress"),
        ("clb", "CreateLoadBalancer"),
        ("clb", "ConfigureHealthCheck"),
        ("nlb", "DescribeLoadBalancers"),
        ("nlb", "CreateLoadBalancer"),
        ("nlb", "CreateTargetGroup"),
        ("nlb", "RegisterTargets"),
        ("nlb", "CreateListener"),
        ("nlb", "DescribeSecurityGroups"),
        ("nlb", "AuthorizeSecurityGroupIngress"),
    ];
    for (i, (kind, action)) in cases.into_iter().enumerate() {
        let case = format!("{kind} {action} garbled");
        let spec = service(50 + i, kind).spec();
        let garbled_before = faulty.proxy.lost().len();
        faulty.proxy.set_plan(FaultPlan::Garble {
            action: Some(action),
        });
        // Whatever the answer, nothing panics and an error says which operation failed. (An
        // answer with nothing in it that the client needs, RegisterTargets', may pass: the
        // call took effect, and the state is checked below.)
        if let Err(error) = faulty
            .restarted(&env)
            .ensure(&spec, &env.nodes(&env.instances))
            .await
        {
            assert!(error.to_string().contains(action), "{case}: {error}");
        }
        assert!(
            faulty.proxy.lost().len() > garbled_before,
            "{case}: the action was called and its answer garbled"
        );
        faulty.proxy.set_plan(FaultPlan::None);
        converge(&env, &faulty, &spec).await;
        assert_converged_then_deleted(&env, &faulty, &spec, kind, &case).await;
    }
}

//! `kube-lb plan` and `kube-lb audit` against moto: plans are computed with reads only (the
//! call counter sees no mutating call), name what `ensure`/`delete` would change and are empty
//! once in sync; the audit lists every resource the provider made with the Service it was made
//! for, so that `delete` of that Service removes it; a refused read is an error, never a
//! shorter answer. The migration checks build load balancers the way the upstream provider
//! does (reference aws.md §2, §4) and show what adoption changes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types::{
    IpPermission, IpRange, ResourceType, Tag, TagSpecification, UserIdGroupPair,
};
use common::{CLUSTER, CLUSTER_TAG, Env, Meter, sdk_config, svc};
use kube_lb_annotations::LoadBalancerSpec;
use kube_lb_mock_aws::{FaultPlan, FaultProxy};
use kube_lb_provider_aws::AwsProvider;
use kube_lb_provider_aws::naming::{TargetGroupNameInput, target_group_name};
use kube_lb_provider_core::naming::load_balancer_name;
use kube_lb_provider_core::{
    CallKind, ChangeAction, LoadBalancerProvider, OwnedResource, PlannedChange,
};

fn uid(n: usize) -> String {
    // The load-balancer name keeps the first 31 hex digits: vary the leading ones.
    format!("{n:08}-0000-4000-8000-a0d17a0d1700")
}

/// `create ClassicLoadBalancer a… CreateLoadBalancer`, one line per change, for assertions
/// and failure messages.
fn lines(changes: &[PlannedChange]) -> Vec<String> {
    changes
        .iter()
        .map(|c| format!("{} {} {} {}", c.action, c.kind, c.name, c.call))
        .collect()
}

/// Whether `text` has the rule change `action` of `rule` on `group`: one line per group and
/// direction (one EC2 call), naming every rule of that call (`group r1, r2`).
fn has_rule(text: &[String], action: &str, group: &str, rule: &str, call: &str) -> bool {
    let prefix = format!("{action} SecurityGroupRule {group} ");
    text.iter().any(|line| {
        line.strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(&format!(" {call}")))
            .is_some_and(|rules| rules.split(", ").any(|r| r == rule))
    })
}

/// The `(old, new)` of `field` in the first change made through `call`.
fn change_of(
    changes: &[PlannedChange],
    call: &str,
    name: &str,
) -> (Option<String>, Option<String>) {
    let change = changes
        .iter()
        .find(|c| c.call == call && c.fields.iter().any(|f| f.field == name))
        .unwrap_or_else(|| panic!("no {call} changing {name} in {:#?}", changes));
    let f = change.fields.iter().find(|f| f.field == name).unwrap();
    (f.old.clone(), f.new.clone())
}

fn some(s: &str) -> Option<String> {
    Some(s.to_string())
}

/// Plans with a fresh provider (as `kube-lb plan` runs) and checks it made no mutating call.
async fn plan(env: &Env, spec: &LoadBalancerSpec, nodes: &[String]) -> Vec<PlannedChange> {
    let provider = env.provider(env.config());
    let meter = Meter::new(&provider);
    let changes = provider.plan_ensure(spec, &env.nodes(nodes)).await.unwrap();
    let calls = meter.take();
    assert_eq!(calls.mutations(), 0, "plan must only read: {calls:?}");
    assert!(calls.reads() > 0, "a plan reads the cloud: {calls:?}");
    changes
}

async fn plan_delete(env: &Env, spec: &LoadBalancerSpec) -> Vec<PlannedChange> {
    let provider = env.provider(env.config());
    let meter = Meter::new(&provider);
    let changes = provider.plan_delete(&spec.service).await.unwrap();
    let calls = meter.take();
    assert_eq!(calls.mutations(), 0, "plan must only read: {calls:?}");
    changes
}

async fn audit(env: &Env) -> Vec<OwnedResource> {
    let provider = env.provider(env.config());
    let meter = Meter::new(&provider);
    let owned = provider.owned_resources().await.unwrap();
    let calls = meter.take();
    assert_eq!(calls.mutations(), 0, "audit must only read: {calls:?}");
    owned
}

/// The audited resources of one Service (by the load-balancer name its UID gives).
fn of<'a>(owned: &'a [OwnedResource], spec: &LoadBalancerSpec) -> Vec<&'a OwnedResource> {
    let name = load_balancer_name(&spec.service.uid);
    owned
        .iter()
        .filter(|r| load_balancer_name(&r.service.uid) == name)
        .collect()
}

fn kinds(resources: &[&OwnedResource]) -> BTreeMap<String, usize> {
    let mut kinds = BTreeMap::new();
    for r in resources {
        *kinds.entry(r.kind.clone()).or_insert(0) += 1;
    }
    kinds
}

#[tokio::test]
async fn audit_lists_each_services_resources_and_delete_of_the_recorded_service_removes_them() {
    let env = Env::start().await;
    let nodes = env.nodes(&env.instances);
    let orphan_clb = svc("web", &uid(1)).port("http", 80, 30080, "TCP").spec();
    let orphan_nlb = svc("api", &uid(2))
        .aws("type", "nlb")
        .port("tcp", 443, 30443, "TCP")
        .spec();
    let keeper = svc("db", &uid(3))
        .aws("type", "nlb")
        .port("tcp", 5432, 30432, "TCP")
        .spec();
    let controller = env.provider(env.config());
    for spec in [&orphan_clb, &orphan_nlb, &keeper] {
        controller.ensure(spec, &nodes).await.unwrap();
    }

    let owned = audit(&env).await;
    // Shared listings, not reads per load balancer: every Classic ELB and ELBv2 load balancer
    // and target group in one page each, tags in batches of 20, the cluster's security groups
    // and those that reference a `k8s-elb-` group in one listing each.
    let auditor = env.provider(env.config());
    let meter = Meter::new(&auditor);
    assert_eq!(auditor.owned_resources().await.unwrap(), owned);
    let want: BTreeMap<&str, u64> = [
        ("ec2:DescribeSecurityGroups", 2),
        ("elb:DescribeLoadBalancers", 1),
        ("elb:DescribeTags", 1),
        ("elbv2:DescribeLoadBalancers", 1),
        ("elbv2:DescribeTargetGroups", 1),
        ("elbv2:DescribeTags", 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(meter.take().operations(CallKind::Read), want);
    let clb = of(&owned, &orphan_clb);
    assert_eq!(
        kinds(&clb),
        BTreeMap::from([
            ("ClassicLoadBalancer".to_string(), 1),
            ("SecurityGroup".to_string(), 1),
            // All traffic from the ELB's group, on the node group.
            ("SecurityGroupRule".to_string(), 1),
        ]),
        "{clb:#?}"
    );
    let nlb = of(&owned, &orphan_nlb);
    assert_eq!(
        kinds(&nlb),
        BTreeMap::from([
            ("NetworkLoadBalancer".to_string(), 1),
            ("TargetGroup".to_string(), 1),
            // Client traffic and path-MTU discovery on the node group.
            ("SecurityGroupRule".to_string(), 2),
        ]),
        "{nlb:#?}"
    );
    let keeper_before = of(&owned, &keeper);
    assert!(!keeper_before.is_empty());
    assert_eq!(
        owned.len(),
        clb.len() + nlb.len() + keeper_before.len(),
        "only these Services' resources: {owned:#?}"
    );
    for (resources, spec) in [(&clb, &orphan_clb), (&nlb, &orphan_nlb)] {
        for r in resources {
            // The Service as the resources record it; the security group has no service-name
            // tag and takes it from its load balancer.
            assert_eq!(
                (r.service.namespace.as_str(), r.service.name.as_str()),
                (spec.service.namespace.as_str(), spec.service.name.as_str()),
                "{r:?}"
            );
            let is_lb = r.kind.ends_with("LoadBalancer");
            assert_eq!(
                r.created.is_some(),
                is_lb,
                "CreatedTime for load balancers: {r:?}"
            );
        }
    }
    let mtu: Vec<_> = owned.iter().filter(|r| r.shared).collect();
    assert!(
        mtu.iter()
            .all(|r| r.kind == "SecurityGroupRule" && r.name.contains("icmp")),
        "only the path-MTU rule is shared: {mtu:#?}"
    );

    // The Services are deleted while the controller is down: a restarted one's audit finds
    // them, and the provider's delete of the Service each resource records removes them.
    let restarted = env.provider(env.config());
    let services: BTreeSet<_> = clb
        .iter()
        .chain(&nlb)
        .map(|r| {
            (
                r.service.namespace.clone(),
                r.service.name.clone(),
                r.service.uid.clone(),
            )
        })
        .collect();
    for r in clb.iter().chain(&nlb) {
        restarted.delete(&r.service).await.unwrap();
    }
    assert_eq!(services.len(), 2, "one Service each: {services:?}");
    let after = audit(&env).await;
    assert!(of(&after, &orphan_clb).is_empty(), "{after:#?}");
    assert!(of(&after, &orphan_nlb).is_empty(), "{after:#?}");
    assert_eq!(after.len(), of(&after, &keeper).len(), "{after:#?}");
    let own = |resources: &[&OwnedResource]| -> Vec<OwnedResource> {
        resources
            .iter()
            .filter(|r| !r.shared)
            .map(|r| (*r).clone())
            .collect()
    };
    let keeper_after = of(&after, &keeper);
    assert_eq!(
        own(&keeper_after),
        own(&keeper_before),
        "the live Service's resources stay"
    );
    // The path-MTU rule both NLBs' clients relied on was the deleted one's; it is handed to
    // the keeper instead of being removed.
    assert!(
        keeper_after
            .iter()
            .any(|r| r.shared && r.name.contains("icmp/3-4 from 0.0.0.0/0")),
        "{keeper_after:#?}"
    );
    // The keeper still works: nothing to change.
    assert!(plan(&env, &keeper, &env.instances).await.is_empty());
}

#[tokio::test]
async fn audit_finds_pieces_left_without_their_load_balancer() {
    let env = Env::start().await;
    let nodes = env.nodes(&env.instances);
    let clb = svc("web", &uid(4)).port("http", 80, 30080, "TCP").spec();
    let nlb = svc("api", &uid(5))
        .aws("type", "nlb")
        .port("tcp", 443, 30443, "TCP")
        .spec();
    let controller = env.provider(env.config());
    controller.ensure(&clb, &nodes).await.unwrap();
    controller.ensure(&nlb, &nodes).await.unwrap();
    // Someone removes the load balancers by hand: the ELB's group and node rule, the NLB's
    // target group and node rules are left (upstream would never find them again).
    env.elb
        .delete_load_balancer()
        .load_balancer_name(load_balancer_name(&clb.service.uid))
        .send()
        .await
        .unwrap();
    let arn = env
        .nlb(&load_balancer_name(&nlb.service.uid))
        .await
        .load_balancer_arn()
        .unwrap()
        .to_string();
    env.elbv2
        .delete_load_balancer()
        .load_balancer_arn(&arn)
        .send()
        .await
        .unwrap();

    let owned = audit(&env).await;
    let left_clb = of(&owned, &clb);
    assert_eq!(
        kinds(&left_clb),
        BTreeMap::from([
            ("SecurityGroup".to_string(), 1),
            ("SecurityGroupRule".to_string(), 1)
        ]),
        "{owned:#?}"
    );
    let left_nlb = of(&owned, &nlb);
    assert_eq!(
        kinds(&left_nlb),
        BTreeMap::from([
            ("TargetGroup".to_string(), 1),
            ("SecurityGroupRule".to_string(), 2)
        ]),
        "{owned:#?}"
    );
    // The target group records its Service by tags.
    let tg = left_nlb.iter().find(|r| r.kind == "TargetGroup").unwrap();
    assert_eq!(
        (tg.service.namespace.as_str(), tg.service.name.as_str()),
        ("default", "api")
    );

    let restarted = env.provider(env.config());
    for r in left_clb.iter().chain(&left_nlb) {
        restarted.delete(&r.service).await.unwrap();
    }
    assert_eq!(audit(&env).await, Vec::<OwnedResource>::new());
    assert!(env.target_group_names().await.is_empty());
    assert_eq!(env.rules(&env.node_sg).await, vec![]);
}

#[tokio::test]
async fn a_refused_read_fails_audit_and_plan_instead_of_answering_less() {
    let env = Env::start().await;
    let nodes = env.nodes(&env.instances);
    let clb = svc("web", &uid(6)).port("http", 80, 30080, "TCP").spec();
    let nlb = svc("api", &uid(7))
        .aws("type", "nlb")
        .port("tcp", 443, 30443, "TCP")
        .spec();
    let controller = env.provider(env.config());
    controller.ensure(&clb, &nodes).await.unwrap();
    controller.ensure(&nlb, &nodes).await.unwrap();

    let proxy = FaultProxy::start(env.moto.addr(), FaultPlan::None)
        .await
        .unwrap();
    let sdk = sdk_config(&proxy.endpoint()).await;
    let through_proxy = || AwsProvider::new(&sdk, env.config(), CLUSTER);
    assert!(!through_proxy().owned_resources().await.unwrap().is_empty());
    for action in [
        "DescribeLoadBalancers",
        "DescribeTags",
        "DescribeTargetGroups",
        "DescribeSecurityGroups",
    ] {
        proxy.set_plan(FaultPlan::Refuse {
            action,
            code: "AccessDenied",
        });
        let error = through_proxy().owned_resources().await.unwrap_err();
        assert!(error.to_string().contains(action), "{action}: {error}");
        for spec in [&clb, &nlb] {
            // A Classic ELB found needs no target-group read.
            if spec == &clb && action == "DescribeTargetGroups" {
                continue;
            }
            let error = through_proxy()
                .plan_ensure(spec, &nodes)
                .await
                .map(|plan| lines(&plan))
                .expect_err(&format!("{action} refused, {}", spec.service));
            assert!(error.to_string().contains(action), "{action}: {error}");
        }
    }
    proxy.set_plan(FaultPlan::None);
    assert!(
        through_proxy()
            .plan_ensure(&nlb, &nodes)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn classic_elb_plan_is_read_only_names_each_change_and_is_empty_once_in_sync() {
    let env = Env::start().await;
    let spec = svc("web", &uid(8)).port("http", 80, 30080, "TCP").spec();
    let name = load_balancer_name(&spec.service.uid);
    let two = &env.instances[..2];

    let fresh = plan(&env, &spec, two).await;
    let text = lines(&fresh);
    let group = format!("create SecurityGroup k8s-elb-{name} CreateSecurityGroup");
    let lb = format!("create ClassicLoadBalancer {name} CreateLoadBalancer");
    let position = |line: &str| text.iter().position(|l| l == line);
    assert!(
        position(&group).is_some() && position(&group) < position(&lb),
        "the group the ELB needs is created first: {text:#?}"
    );
    assert_eq!(
        change_of(&fresh, "ConfigureHealthCheck", "HealthCheck.Target"),
        (None, some("TCP:30080"))
    );
    let authorize = "AuthorizeSecurityGroupIngress";
    assert!(
        has_rule(
            &text,
            "create",
            &env.node_sg,
            &format!("all from k8s-elb-{name}"),
            authorize
        ),
        "{text:#?}"
    );
    assert!(
        has_rule(
            &text,
            "create",
            &format!("k8s-elb-{name}"),
            "tcp/80 from 0.0.0.0/0",
            authorize
        ),
        "{text:#?}"
    );
    assert_eq!(
        env.elb
            .describe_load_balancers()
            .send()
            .await
            .unwrap()
            .load_balancer_descriptions()
            .len(),
        0,
        "nothing was created"
    );

    env.provider(env.config())
        .ensure(&spec, &env.nodes(two))
        .await
        .unwrap();
    assert_eq!(lines(&plan(&env, &spec, two).await), Vec::<String>::new());

    // A changed Service: each field old → new.
    let changed = svc("web", &uid(8))
        .port("http", 80, 30080, "TCP")
        .source_range("10.1.0.0/16")
        .aws("healthcheck-interval", "20")
        .aws("cross-zone-load-balancing-enabled", "true")
        .spec();
    let changes = plan(&env, &changed, &env.instances).await;
    assert_eq!(
        change_of(&changes, "ConfigureHealthCheck", "HealthCheck.Interval"),
        (some("10"), some("20"))
    );
    assert_eq!(
        change_of(
            &changes,
            "ModifyLoadBalancerAttributes",
            "CrossZoneLoadBalancing.Enabled"
        ),
        (some("false"), some("true"))
    );
    assert_eq!(
        change_of(&changes, "RegisterInstancesWithLoadBalancer", "Instances"),
        (None, Some(env.instances[2].clone()))
    );
    let text = lines(&changes);
    for rule in ["tcp/80 from 0.0.0.0/0", "icmp/3-4 from 0.0.0.0/0"] {
        assert!(
            text.iter()
                .any(|l| l.starts_with("delete SecurityGroupRule") && l.contains(rule)),
            "{rule}: {text:#?}"
        );
    }
    assert!(
        text.iter()
            .any(|l| l.starts_with("create SecurityGroupRule")
                && l.contains("tcp/80 from 10.1.0.0/16")),
        "{text:#?}"
    );
    env.provider(env.config())
        .ensure(&changed, &env.nodes(&env.instances))
        .await
        .unwrap();
    assert_eq!(
        lines(&plan(&env, &changed, &env.instances).await),
        Vec::<String>::new()
    );

    // A kind change: the Classic ELB side goes before the NLB is made.
    let as_nlb = svc("web", &uid(8))
        .aws("type", "nlb")
        .port("http", 80, 30080, "TCP")
        .spec();
    let text = lines(&plan(&env, &as_nlb, &env.instances).await);
    let delete_clb = format!("delete ClassicLoadBalancer {name} DeleteLoadBalancer");
    let create_nlb = format!("create NetworkLoadBalancer {name} CreateLoadBalancer");
    let at = |line: &str| {
        text.iter()
            .position(|l| l == line)
            .unwrap_or_else(|| panic!("{line}: {text:#?}"))
    };
    assert!(at(&delete_clb) < at(&create_nlb), "{text:#?}");

    let deletes = lines(&plan_delete(&env, &changed).await);
    assert!(deletes.contains(&delete_clb), "{deletes:#?}");
    assert!(
        deletes
            .iter()
            .any(|l| l.starts_with("delete SecurityGroup ") && l.ends_with("DeleteSecurityGroup")),
        "{deletes:#?}"
    );
    assert!(
        deletes
            .iter()
            .any(|l| l.starts_with(&format!("delete SecurityGroupRule {}", env.node_sg))),
        "{deletes:#?}"
    );
    env.provider(env.config())
        .delete(&changed.service)
        .await
        .unwrap();
    assert_eq!(
        lines(&plan_delete(&env, &changed).await),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn nlb_plan_is_read_only_names_each_change_and_is_empty_once_in_sync() {
    let env = Env::start().await;
    let spec = svc("api", &uid(9))
        .aws("type", "nlb")
        .port("tcp", 443, 30443, "TCP")
        .spec();
    let name = load_balancer_name(&spec.service.uid);
    let two = &env.instances[..2];

    let text = lines(&plan(&env, &spec, two).await);
    for line in [
        format!("create NetworkLoadBalancer {name} CreateLoadBalancer"),
        format!("create Listener {name}:443 CreateListener"),
    ] {
        assert!(text.contains(&line), "{line}: {text:#?}");
    }
    assert!(
        text.iter()
            .any(|l| l.starts_with("create TargetGroup k8s-default-api-")),
        "{text:#?}"
    );
    assert!(
        has_rule(
            &text,
            "create",
            &env.node_sg,
            "tcp/30443 from 0.0.0.0/0",
            "AuthorizeSecurityGroupIngress"
        ),
        "{text:#?}"
    );

    env.provider(env.config())
        .ensure(&spec, &env.nodes(two))
        .await
        .unwrap();
    assert_eq!(lines(&plan(&env, &spec, two).await), Vec::<String>::new());

    let changed = svc("api", &uid(9))
        .aws("type", "nlb")
        .port("tcp", 443, 30443, "TCP")
        .aws("healthcheck-healthy-threshold", "5")
        .aws("cross-zone-load-balancing-enabled", "true")
        .source_range("10.1.0.0/16")
        .spec();
    let changes = plan(&env, &changed, &env.instances).await;
    assert_eq!(
        change_of(&changes, "ModifyTargetGroup", "HealthyThresholdCount"),
        (some("3"), some("5"))
    );
    assert_eq!(
        change_of(
            &changes,
            "ModifyLoadBalancerAttributes",
            "load_balancing.cross_zone.enabled"
        ),
        (some("false"), some("true"))
    );
    assert_eq!(
        change_of(&changes, "RegisterTargets", "Targets"),
        (None, Some(format!("{}:30443", env.instances[2])))
    );
    let text = lines(&changes);
    assert!(
        text.iter()
            .any(|l| l.starts_with("create SecurityGroupRule")
                && l.contains("tcp/30443 from 10.1.0.0/16")),
        "{text:#?}"
    );
    env.provider(env.config())
        .ensure(&changed, &env.nodes(&env.instances))
        .await
        .unwrap();
    assert_eq!(
        lines(&plan(&env, &changed, &env.instances).await),
        Vec::<String>::new()
    );

    let deletes = lines(&plan_delete(&env, &changed).await);
    for line in [
        format!("delete Listener {name}:443 DeleteListener"),
        format!("delete NetworkLoadBalancer {name} DeleteLoadBalancer"),
    ] {
        assert!(deletes.contains(&line), "{line}: {deletes:#?}");
    }
    assert!(
        deletes
            .iter()
            .any(|l| l.starts_with("delete TargetGroup k8s-default-api-")),
        "{deletes:#?}"
    );
    env.provider(env.config())
        .delete(&changed.service)
        .await
        .unwrap();
    assert_eq!(
        lines(&plan_delete(&env, &changed).await),
        Vec::<String>::new()
    );
}

fn tags_for(resource: ResourceType, tags: &[(&str, &str)]) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(
            tags.iter()
                .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
                .collect(),
        ))
        .build()
}

/// Builds, with the SDK, what cloud-provider-aws leaves for a plain `Service` with one TCP
/// port on a Classic ELB (aws.md §2.1-2.3, §3.1, §4.4, §4.6).
async fn upstream_classic_elb(
    env: &Env,
    spec: &LoadBalancerSpec,
    additional_tags: &[(&str, &str)],
) {
    let name = load_balancer_name(&spec.service.uid);
    let group = env
        .ec2
        .create_security_group()
        .group_name(format!("k8s-elb-{name}"))
        .description(format!(
            "Security group for Kubernetes ELB {name} ({})",
            spec.service
        ))
        .vpc_id(&env.vpc)
        .tag_specifications(tags_for(
            ResourceType::SecurityGroup,
            &[(CLUSTER_TAG, "owned")],
        ))
        .send()
        .await
        .unwrap()
        .group_id()
        .unwrap()
        .to_string();
    let from_anywhere = |protocol: &str, from: i32, to: i32| {
        IpPermission::builder()
            .ip_protocol(protocol)
            .from_port(from)
            .to_port(to)
            .ip_ranges(IpRange::builder().cidr_ip("0.0.0.0/0").build())
            .build()
    };
    env.ec2
        .authorize_security_group_ingress()
        .group_id(&group)
        .ip_permissions(from_anywhere("tcp", 80, 80))
        .ip_permissions(from_anywhere("icmp", 3, 4))
        .send()
        .await
        .unwrap();
    use aws_sdk_elasticloadbalancing::types as elb;
    env.elb
        .create_load_balancer()
        .load_balancer_name(&name)
        .listeners(
            elb::Listener::builder()
                .protocol("tcp")
                .load_balancer_port(80)
                .instance_protocol("tcp")
                .instance_port(30080)
                .build()
                .unwrap(),
        )
        .set_subnets(Some(env.subnets.clone()))
        .security_groups(&group)
        .set_tags(Some(
            [
                ("kubernetes.io/service-name", spec.service.to_string()),
                (CLUSTER_TAG, "owned".to_string()),
            ]
            .into_iter()
            .chain(additional_tags.iter().map(|(k, v)| (*k, v.to_string())))
            .map(|(k, v)| elb::Tag::builder().key(k).value(v).build().unwrap())
            .collect(),
        ))
        .send()
        .await
        .unwrap();
    env.elb
        .modify_load_balancer_attributes()
        .load_balancer_name(&name)
        .load_balancer_attributes(
            elb::LoadBalancerAttributes::builder()
                .cross_zone_load_balancing(
                    elb::CrossZoneLoadBalancing::builder()
                        .enabled(false)
                        .build(),
                )
                .connection_draining(elb::ConnectionDraining::builder().enabled(false).build())
                .access_log(elb::AccessLog::builder().enabled(false).build())
                .connection_settings(
                    elb::ConnectionSettings::builder()
                        .idle_timeout(60)
                        .build()
                        .unwrap(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    env.elb
        .configure_health_check()
        .load_balancer_name(&name)
        .health_check(
            elb::HealthCheck::builder()
                .target("TCP:30080")
                .interval(10)
                .timeout(5)
                .healthy_threshold(2)
                .unhealthy_threshold(6)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    env.ec2
        .authorize_security_group_ingress()
        .group_id(&env.node_sg)
        .ip_permissions(
            IpPermission::builder()
                .ip_protocol("-1")
                .user_id_group_pairs(UserIdGroupPair::builder().group_id(&group).build())
                .build(),
        )
        .send()
        .await
        .unwrap();
    env.elb
        .register_instances_with_load_balancer()
        .load_balancer_name(&name)
        .set_instances(Some(
            env.instances
                .iter()
                .map(|i| elb::Instance::builder().instance_id(i).build())
                .collect(),
        ))
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn migration_from_upstream_classic_elb_is_adopted_without_changes() {
    let env = Env::start().await;
    let spec = svc("web", &uid(10)).port("http", 80, 30080, "TCP").spec();
    upstream_classic_elb(&env, &spec, &[]).await;
    let changes = plan(&env, &spec, &env.instances).await;
    assert_eq!(changes, vec![], "{:#?}", lines(&changes));
    // The audit counts it as this Service's, and a restart's ensure changes nothing either.
    let owned = audit(&env).await;
    assert_eq!(of(&owned, &spec).len(), 3, "{owned:#?}");
    let provider = env.provider(env.config());
    let meter = Meter::new(&provider);
    provider
        .ensure(&spec, &env.nodes(&env.instances))
        .await
        .unwrap();
    assert_eq!(meter.take().operations(CallKind::Mutate), BTreeMap::new());
}

/// What cloud-provider-aws leaves for a plain NLB `Service` with one TCP port (aws.md §2.4,
/// §2.5, §3.3, §4.5, §4.7): the target group carries no load-balancer-name tag and the MTU
/// rule's description names no load balancer.
async fn upstream_nlb(env: &Env, spec: &LoadBalancerSpec) {
    use aws_sdk_elasticloadbalancingv2::types as v2;
    let name = load_balancer_name(&spec.service.uid);
    let tags = || {
        vec![
            v2::Tag::builder()
                .key("kubernetes.io/service-name")
                .value(spec.service.to_string())
                .build(),
            v2::Tag::builder().key(CLUSTER_TAG).value("owned").build(),
        ]
    };
    let lb = env
        .elbv2
        .create_load_balancer()
        .name(&name)
        .r#type(v2::LoadBalancerTypeEnum::Network)
        .scheme(v2::LoadBalancerSchemeEnum::InternetFacing)
        .set_subnets(Some(env.subnets.clone()))
        .set_tags(Some(tags()))
        .send()
        .await
        .unwrap();
    let lb_arn = lb.load_balancers()[0]
        .load_balancer_arn()
        .unwrap()
        .to_string();
    let tg_name = target_group_name(
        &spec.service,
        TargetGroupNameInput {
            cluster_id: CLUSTER,
            service_port: 443,
            node_port: 30443,
            target_protocol: "TCP",
            health_check_protocol: "TCP",
            health_check_interval: 30,
        },
    );
    let tg = env
        .elbv2
        .create_target_group()
        .name(&tg_name)
        .protocol(v2::ProtocolEnum::Tcp)
        .port(30443)
        .vpc_id(&env.vpc)
        .target_type(v2::TargetTypeEnum::Instance)
        .health_check_protocol(v2::ProtocolEnum::Tcp)
        .health_check_port("traffic-port")
        .health_check_interval_seconds(30)
        .healthy_threshold_count(3)
        .unhealthy_threshold_count(3)
        .set_tags(Some(tags()))
        .send()
        .await
        .unwrap();
    let tg_arn = tg.target_groups()[0]
        .target_group_arn()
        .unwrap()
        .to_string();
    env.elbv2
        .register_targets()
        .target_group_arn(&tg_arn)
        .set_targets(Some(
            env.instances
                .iter()
                .map(|i| v2::TargetDescription::builder().id(i).port(30443).build())
                .collect(),
        ))
        .send()
        .await
        .unwrap();
    env.elbv2
        .create_listener()
        .load_balancer_arn(&lb_arn)
        .protocol(v2::ProtocolEnum::Tcp)
        .port(443)
        .default_actions(
            v2::Action::builder()
                .r#type(v2::ActionTypeEnum::Forward)
                .target_group_arn(&tg_arn)
                .build(),
        )
        .set_tags(Some(tags()))
        .send()
        .await
        .unwrap();
    let rule = |protocol: &str, from: i32, to: i32, description: &str| {
        IpPermission::builder()
            .ip_protocol(protocol)
            .from_port(from)
            .to_port(to)
            .ip_ranges(
                IpRange::builder()
                    .cidr_ip("0.0.0.0/0")
                    .description(description)
                    .build(),
            )
            .build()
    };
    env.ec2
        .authorize_security_group_ingress()
        .group_id(&env.node_sg)
        .ip_permissions(rule(
            "tcp",
            30443,
            30443,
            &format!("kubernetes.io/rule/nlb/client={name}"),
        ))
        .ip_permissions(rule("icmp", 3, 4, "kubernetes.io/rule/nlb/mtu"))
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn migration_from_upstream_nlb_shows_what_adoption_changes() {
    let env = Env::start().await;
    let spec = svc("api", &uid(11))
        .aws("type", "nlb")
        .port("tcp", 443, 30443, "TCP")
        .spec();
    upstream_nlb(&env, &spec).await;
    let changes = plan(&env, &spec, &env.instances).await;
    // Adoption tags the target group with the load balancer it serves (so its orphans are
    // told apart from a re-created Service's) and sends the health-check timeout upstream
    // leaves at AWS's default; nothing is replaced and no traffic path changes.
    let text = lines(&changes);
    assert_eq!(text.len(), 1, "{changes:#?}");
    assert!(
        changes
            .iter()
            .all(|c| c.action == ChangeAction::Modify && c.kind == "TargetGroup"),
        "{changes:#?}"
    );
    let tagging = changes
        .iter()
        .find(|c| c.call == "AddTags")
        .expect("tags added");
    assert_eq!(
        tagging
            .fields
            .iter()
            .map(|f| (f.field.as_str(), f.old.clone(), f.new.clone()))
            .collect::<Vec<_>>(),
        vec![(
            "Tags[kube-lb.io/load-balancer-name]",
            None,
            Some(load_balancer_name(&spec.service.uid))
        )],
        "{text:#?}"
    );
    eprintln!("upstream NLB adoption plan: {changes:#?}");

    let provider = env.provider(env.config());
    provider
        .ensure(&spec, &env.nodes(&env.instances))
        .await
        .unwrap();
    assert_eq!(
        lines(&plan(&env, &spec, &env.instances).await),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn migration_from_upstream_classic_elb_with_additional_tags_only_records_their_keys() {
    let env = Env::start().await;
    let spec = svc("web", &uid(12))
        .port("http", 80, 30080, "TCP")
        .aws("additional-resource-tags", "team=a")
        .spec();
    upstream_classic_elb(&env, &spec, &[("team", "a")]).await;
    // Upstream never removes a tag; kube-lb records which keys came from the annotation so
    // that a key later removed from it is removed from AWS. Adopting adds that record only.
    let changes = plan(&env, &spec, &env.instances).await;
    let fields: Vec<_> = changes
        .iter()
        .flat_map(|c| {
            c.fields.iter().map(move |f| {
                (
                    c.call.as_str(),
                    f.field.as_str(),
                    f.old.clone(),
                    f.new.clone(),
                )
            })
        })
        .collect();
    assert_eq!(
        fields,
        vec![(
            "AddTags",
            "Tags[kube-lb.io/additional-tag-keys]",
            None,
            some("team")
        )],
        "{:#?}",
        lines(&changes)
    );
}

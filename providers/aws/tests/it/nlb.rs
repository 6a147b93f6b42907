//! NLB against moto's server: every NLB annotation read back, the seed's node security-group
//! rule table with descriptions, exact call counts, TCP→TLS in place, and leak-free delete even
//! after a partial failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::{Env, Meter, lb_reads, svc, zone_subnets};
use kube_lb_provider_aws::sg::IngressRule;
use kube_lb_provider_core::CallKind;
use kube_lb_provider_core::LoadBalancerProvider;
use kube_lb_provider_core::naming::load_balancer_name;

const UID: &str = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

fn counts(pairs: &[(&'static str, u64)]) -> BTreeMap<&'static str, u64> {
    pairs.iter().copied().collect()
}

async fn lb_arn(env: &Env, name: &str) -> Option<String> {
    let response = env
        .elbv2
        .describe_load_balancers()
        .names(name)
        .send()
        .await
        .ok()?;
    response
        .load_balancers()
        .first()?
        .load_balancer_arn()
        .map(str::to_string)
}

/// (port, protocol, certificate, ssl policy, target group ARN) per listener.
type ListenerRow = (i32, String, Option<String>, Option<String>, String);

async fn listeners(env: &Env, arn: &str) -> Vec<ListenerRow> {
    let response = env
        .elbv2
        .describe_listeners()
        .load_balancer_arn(arn)
        .send()
        .await
        .unwrap();
    let mut out: Vec<_> = response
        .listeners()
        .iter()
        .map(|l| {
            (
                l.port().unwrap(),
                l.protocol().unwrap().as_str().to_string(),
                l.certificates()
                    .first()
                    .and_then(|c| c.certificate_arn())
                    .map(str::to_string),
                l.ssl_policy().map(str::to_string),
                l.default_actions()[0]
                    .target_group_arn()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

async fn our_rules(env: &Env, name: &str) -> Vec<IngressRule> {
    let mut rules: Vec<IngressRule> = env
        .rules(&env.node_sg)
        .await
        .into_iter()
        .filter(|r| {
            r.description
                .as_deref()
                .is_some_and(|d| d.ends_with(&format!("={name}")))
        })
        .collect();
    rules.sort();
    rules
}

#[tokio::test]
async fn every_nlb_annotation_reaches_aws() {
    let env = Env::start().await;
    let provider = env.provider(env.config());
    let meter = Meter::new(&provider);
    let eips = [env.eip().await, env.eip().await];
    let service = svc("api", UID)
        .port("http", 80, 30080, "TCP")
        .port("https", 443, 30443, "TCP")
        .source_range("1.2.3.0/24")
        .aws("type", "nlb")
        .aws("ssl-cert", &env.cert)
        .aws("ssl-ports", "443")
        .aws(
            "ssl-negotiation-policy",
            "ELBSecurityPolicy-TLS-1-2-2017-01",
        )
        .aws("backend-protocol", "tcp")
        .aws("cross-zone-load-balancing-enabled", "true")
        .aws("access-log-enabled", "true")
        .aws("access-log-s3-bucket-name", "logs")
        .aws("access-log-s3-bucket-prefix", "nlb")
        .aws("additional-resource-tags", "environment=prod,owner=devops")
        .aws("healthcheck-protocol", "http")
        .aws("healthcheck-path", "/ready")
        .aws("healthcheck-interval", "10")
        .aws("healthcheck-timeout", "6")
        .aws("healthcheck-healthy-threshold", "2")
        .aws("healthcheck-unhealthy-threshold", "4")
        .aws(
            "target-group-attributes",
            "proxy_protocol_v2.enabled=true,preserve_client_ip.enabled=true",
        )
        .aws("eip-allocations", &eips.join(","));
    let spec = service.spec();
    let name = load_balancer_name(UID);
    let status = provider
        .ensure(&spec, &env.nodes(&env.instances))
        .await
        .unwrap();
    assert!(
        status.ingress[0]
            .hostname
            .as_deref()
            .unwrap()
            .contains(&name)
    );
    let create = meter.take();
    // Upstream: ~15 for one port, +3 per port, + attributes (aws.md §3.3); +1 for the look
    // for a Classic ELB of this Service (a kind change to remove first).
    assert!(create.reads() + create.mutations() <= 19, "{:?}", create);

    let arn = lb_arn(&env, &name).await.unwrap();
    let lb = env.nlb(&name).await;
    assert_eq!(lb.scheme().unwrap().as_str(), "internet-facing");
    assert_eq!(zone_subnets(&lb), env.subnets.iter().cloned().collect());

    let ls = listeners(&env, &arn).await;
    assert_eq!(ls.len(), 2);
    assert_eq!(
        (ls[0].0, ls[0].1.as_str(), ls[0].2.as_deref()),
        (80, "TCP", None)
    );
    assert_eq!(
        (
            ls[1].0,
            ls[1].1.as_str(),
            ls[1].2.as_deref(),
            ls[1].3.as_deref()
        ),
        (
            443,
            "TLS",
            Some(env.cert.as_str()),
            Some("ELBSecurityPolicy-TLS-1-2-2017-01")
        )
    );
    let tgs = env
        .elbv2
        .describe_target_groups()
        .load_balancer_arn(&arn)
        .send()
        .await
        .unwrap();
    let mut by_port: BTreeMap<i32, aws_sdk_elasticloadbalancingv2::types::TargetGroup> = tgs
        .target_groups()
        .iter()
        .map(|t| (t.port().unwrap(), t.clone()))
        .collect();
    let tg80 = by_port.remove(&30080).unwrap();
    assert!(
        tg80.target_group_name()
            .unwrap()
            .starts_with("k8s-default-api-")
    );
    assert_eq!(tg80.protocol().unwrap().as_str(), "TCP");
    assert_eq!(tg80.health_check_protocol().unwrap().as_str(), "HTTP");
    assert_eq!(tg80.health_check_path(), Some("/ready"));
    assert_eq!(tg80.health_check_port(), Some("traffic-port"));
    assert_eq!(
        (
            tg80.health_check_interval_seconds(),
            tg80.health_check_timeout_seconds(),
            tg80.healthy_threshold_count(),
            tg80.unhealthy_threshold_count()
        ),
        (Some(10), Some(6), Some(2), Some(4)),
        "the timeout is sent (upstream never sends it)"
    );
    assert!(by_port.contains_key(&30443));
    let health = env
        .elbv2
        .describe_target_health()
        .target_group_arn(tg80.target_group_arn().unwrap())
        .send()
        .await
        .unwrap();
    let targets: BTreeSet<String> = health
        .target_health_descriptions()
        .iter()
        .map(|d| d.target().unwrap().id().unwrap().to_string())
        .collect();
    assert_eq!(targets, env.instances.iter().cloned().collect());
    let attrs = env
        .elbv2
        .describe_target_group_attributes()
        .target_group_arn(tg80.target_group_arn().unwrap())
        .send()
        .await
        .unwrap();
    let attrs: BTreeMap<String, String> = attrs
        .attributes()
        .iter()
        .map(|a| (a.key().unwrap().to_string(), a.value().unwrap().to_string()))
        .collect();
    assert_eq!(
        attrs.get("proxy_protocol_v2.enabled").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        attrs.get("preserve_client_ip.enabled").map(String::as_str),
        Some("true")
    );
    let lb_attrs = env
        .elbv2
        .describe_load_balancer_attributes()
        .load_balancer_arn(&arn)
        .send()
        .await
        .unwrap();
    let lb_attrs: BTreeMap<String, String> = lb_attrs
        .attributes()
        .iter()
        .map(|a| (a.key().unwrap().to_string(), a.value().unwrap().to_string()))
        .collect();
    assert_eq!(
        lb_attrs
            .get("load_balancing.cross_zone.enabled")
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        lb_attrs.get("access_logs.s3.enabled").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        lb_attrs.get("access_logs.s3.bucket").map(String::as_str),
        Some("logs")
    );
    assert_eq!(
        lb_attrs.get("access_logs.s3.prefix").map(String::as_str),
        Some("nlb")
    );
    let tags = env
        .elbv2
        .describe_tags()
        .resource_arns(&arn)
        .resource_arns(tg80.target_group_arn().unwrap())
        .send()
        .await
        .unwrap();
    for description in tags.tag_descriptions() {
        let tags: BTreeMap<String, String> = description
            .tags()
            .iter()
            .map(|t| (t.key().unwrap().to_string(), t.value().unwrap().to_string()))
            .collect();
        assert_eq!(tags.get("environment").map(String::as_str), Some("prod"));
        assert_eq!(
            tags.get(common::CLUSTER_TAG).map(String::as_str),
            Some("owned")
        );
        assert_eq!(
            tags.get("kubernetes.io/service-name").map(String::as_str),
            Some("default/api")
        );
    }

    // Seed 001 table: client (node ports, source ranges), health (node ports, VPC CIDR — the
    // source ranges do not cover them), MTU (ICMP 3/4, source ranges).
    let client = format!("kubernetes.io/rule/nlb/client={name}");
    let health = format!("kubernetes.io/rule/nlb/health={name}");
    let mtu = format!("kubernetes.io/rule/nlb/mtu={name}");
    let mut want = vec![
        IngressRule::port("tcp", 30080, "1.2.3.0/24", Some(&client)),
        IngressRule::port("tcp", 30443, "1.2.3.0/24", Some(&client)),
        IngressRule::port("tcp", 30080, "10.0.0.0/16", Some(&health)),
        IngressRule::port("tcp", 30443, "10.0.0.0/16", Some(&health)),
        IngressRule::mtu("1.2.3.0/24", Some(&mtu)),
    ];
    want.sort();
    assert_eq!(our_rules(&env, &name).await, want);

    // No-op resync: same spec, node groups and backends as the verified state → no call.
    provider
        .ensure(&spec, &env.nodes(&env.instances))
        .await
        .unwrap();
    let resync = meter.take();
    assert_eq!(resync.mutations(), 0, "{:?}", resync);
    assert_eq!(resync.reads(), 0, "{:?}", resync);

    // Annotation change: only the attribute call.
    let changed = service
        .clone()
        .aws("cross-zone-load-balancing-enabled", "false")
        .spec();
    provider
        .ensure(&changed, &env.nodes(&env.instances))
        .await
        .unwrap();
    let update = meter.take();
    assert_eq!(
        update.operations(CallKind::Mutate),
        counts(&[("elbv2:ModifyLoadBalancerAttributes", 1)])
    );

    // Health-check timeout and thresholds change in place (no target-group replacement).
    let changed = service
        .clone()
        .aws("cross-zone-load-balancing-enabled", "false")
        .aws("healthcheck-unhealthy-threshold", "5")
        .aws("healthcheck-timeout", "5")
        .spec();
    provider
        .ensure(&changed, &env.nodes(&env.instances))
        .await
        .unwrap();
    let update = meter.take();
    assert_eq!(
        update.operations(CallKind::Mutate),
        counts(&[("elbv2:ModifyTargetGroup", 2)])
    );

    provider.delete(&spec.service).await.unwrap();
    assert!(lb_arn(&env, &name).await.is_none());
    assert!(env.target_group_names().await.is_empty());
    assert!(our_rules(&env, &name).await.is_empty());
    assert!(provider.status(&spec.service).await.unwrap().is_none());
}

#[tokio::test]
async fn nlb_nodes_traffic_policy_tls_switch_and_labels() {
    let env = Env::start().await;
    let provider = env.provider(env.config());
    let meter = Meter::new(&provider);
    let service = svc("dns", UID)
        .port("tcp", 80, 30080, "TCP")
        .aws("type", "nlb");
    let spec = service.spec();
    let name = load_balancer_name(UID);
    provider
        .ensure(&spec, &env.nodes(&env.instances))
        .await
        .unwrap();
    let create = meter.take();
    assert_eq!(
        create.operations(CallKind::Mutate),
        counts(&[
            ("ec2:AuthorizeSecurityGroupIngress", 1),
            ("elbv2:CreateListener", 1),
            ("elbv2:CreateLoadBalancer", 1),
            ("elbv2:CreateTargetGroup", 1),
            ("elbv2:RegisterTargets", 1),
        ])
    );
    assert!(create.reads() + create.mutations() < 15, "{:?}", create);
    // Open to all over TCP on the traffic port: the client rule covers health checks.
    let client = format!("kubernetes.io/rule/nlb/client={name}");
    let mtu = format!("kubernetes.io/rule/nlb/mtu={name}");
    assert_eq!(
        our_rules(&env, &name).await,
        vec![
            IngressRule::mtu("0.0.0.0/0", Some(&mtu)),
            IngressRule::port("tcp", 30080, "0.0.0.0/0", Some(&client)),
        ]
    );

    // Node add: RegisterTargets only, one read.
    let new = env.add_instance().await;
    let mut nodes = env.instances.clone();
    nodes.push(new);
    provider.ensure(&spec, &env.nodes(&nodes)).await.unwrap();
    let add = meter.take();
    assert_eq!(
        add.operations(CallKind::Mutate),
        counts(&[("elbv2:RegisterTargets", 1)])
    );
    assert_eq!(lb_reads(&add), 1, "{:?}", add);

    // Node removed: DeregisterTargets only.
    provider
        .ensure(&spec, &env.nodes(&nodes[1..]))
        .await
        .unwrap();
    let remove = meter.take();
    assert_eq!(
        remove.operations(CallKind::Mutate),
        counts(&[("elbv2:DeregisterTargets", 1)])
    );
    assert_eq!(lb_reads(&remove), 1);

    // target-node-labels: nodes without the label are not registered.
    let labelled = service
        .clone()
        .aws("target-node-labels", "pool=edge")
        .spec();
    let mut edge = common::node(&nodes[1]);
    edge.labels.insert("pool".into(), "edge".into());
    let mut backends = vec![edge];
    backends.extend(env.nodes(&nodes[2..]));
    assert!(provider.accepts_node(&labelled, &backends[0]));
    assert!(!provider.accepts_node(&labelled, &backends[1]));
    provider.ensure(&labelled, &backends).await.unwrap();
    let arn = lb_arn(&env, &name).await.unwrap();
    let tg = listeners(&env, &arn).await[0].4.clone();
    let health = env
        .elbv2
        .describe_target_health()
        .target_group_arn(&tg)
        .send()
        .await
        .unwrap();
    let targets: Vec<String> = health
        .target_health_descriptions()
        .iter()
        .map(|d| d.target().unwrap().id().unwrap().to_string())
        .collect();
    assert_eq!(targets, vec![nodes[1].clone()]);
    meter.take();

    // Cluster → Local: HTTP health check on healthCheckNodePort /healthz replaces the target
    // group (AWS cannot change an NLB target group's health-check protocol); the health rule
    // from the VPC CIDR appears.
    let local = service.clone().local(32000).spec();
    provider.ensure(&local, &env.nodes(&nodes)).await.unwrap();
    let switch = meter.take();
    assert_eq!(
        switch.operations(CallKind::Mutate),
        counts(&[
            ("ec2:AuthorizeSecurityGroupIngress", 1),
            ("elbv2:CreateTargetGroup", 1),
            ("elbv2:DeleteTargetGroup", 1),
            ("elbv2:ModifyListener", 1),
            ("elbv2:RegisterTargets", 1),
        ])
    );
    let tg = listeners(&env, &arn).await[0].4.clone();
    let described = env
        .elbv2
        .describe_target_groups()
        .target_group_arns(&tg)
        .send()
        .await
        .unwrap();
    let described = &described.target_groups()[0];
    assert_eq!(described.health_check_protocol().unwrap().as_str(), "HTTP");
    assert_eq!(described.health_check_port(), Some("32000"));
    assert_eq!(described.health_check_path(), Some("/healthz"));
    let health_rule = IngressRule::port(
        "tcp",
        32000,
        "10.0.0.0/16",
        Some(&format!("kubernetes.io/rule/nlb/health={name}")),
    );
    assert!(our_rules(&env, &name).await.contains(&health_rule));
    assert_eq!(
        env.target_group_names().await.len(),
        1,
        "the old target group is deleted"
    );

    // TCP → TLS on the same port: ModifyListener in place (upstream fails with DuplicateListener).
    let tls = service
        .clone()
        .local(32000)
        .aws("ssl-cert", &env.cert)
        .spec();
    provider.ensure(&tls, &env.nodes(&nodes)).await.unwrap();
    let to_tls = meter.take();
    // One ModifyListener, as on real AWS: the port never loses its listener. (moto 5 refuses
    // TLS in ModifyListener; the harness patches moto, never the provider: MOTO_PATCHES.)
    assert_eq!(
        to_tls.operations(CallKind::Mutate),
        counts(&[("elbv2:ModifyListener", 1)])
    );
    let ls = listeners(&env, &arn).await;
    assert_eq!((ls[0].0, ls[0].1.as_str()), (80, "TLS"));

    // Back to Cluster.
    provider.ensure(&spec, &env.nodes(&nodes)).await.unwrap();
    meter.take();
    assert!(!our_rules(&env, &name).await.contains(&health_rule));

    // Internal toggled: upstream never re-syncs the scheme; kube-lb recreates the NLB.
    let internal = service.clone().aws("internal", "true").spec();
    provider
        .ensure(&internal, &env.nodes(&nodes))
        .await
        .unwrap();
    assert_eq!(env.nlb(&name).await.scheme().unwrap().as_str(), "internal");
    assert_eq!(env.target_group_names().await.len(), 1);

    provider.delete(&spec.service).await.unwrap();
    assert!(env.target_group_names().await.is_empty());
    assert!(our_rules(&env, &name).await.is_empty());
}

#[tokio::test]
async fn delete_resumes_after_the_load_balancer_is_already_gone() {
    let env = Env::start().await;
    let provider = env.provider(env.config());
    let spec = svc("jobs", UID)
        .port("tcp", 80, 30080, "TCP")
        .source_range("1.2.3.0/24")
        .aws("type", "nlb")
        .spec();
    let name = load_balancer_name(UID);
    provider
        .ensure(&spec, &env.nodes(&env.instances))
        .await
        .unwrap();
    assert!(!our_rules(&env, &name).await.is_empty());
    // A crash right after DeleteLoadBalancer: the NLB is gone, everything else is left.
    let arn = lb_arn(&env, &name).await.unwrap();
    env.elbv2
        .delete_load_balancer()
        .load_balancer_arn(&arn)
        .send()
        .await
        .unwrap();
    assert_eq!(env.target_group_names().await.len(), 1);

    // A fresh provider (controller restart) with no memory of the load balancer.
    let restarted = env.provider(env.config());
    restarted.delete(&spec.service).await.unwrap();
    assert!(
        env.target_group_names().await.is_empty(),
        "orphaned target group found by tags"
    );
    // Node rules are found by description on cluster-tagged groups.
    assert!(our_rules(&env, &name).await.is_empty());
    restarted.delete(&spec.service).await.unwrap();
}

#[tokio::test]
async fn internal_nlb_in_annotated_subnets_with_private_addresses() {
    let env = Env::start().await;
    let provider = env.provider(env.config());
    let meter = Meter::new(&provider);
    // One subnet by ID, one by its Name tag.
    let spec = svc("internal", UID)
        .port("udp", 53, 30053, "UDP")
        .aws("type", "nlb")
        .aws("internal", "true")
        .aws("subnets", &format!("{},cluster-b", env.subnets[0]))
        .aws("private-ipv4-addresses", "10.0.1.10,10.0.2.10")
        .aws("healthcheck-port", "31053")
        .spec();
    let name = load_balancer_name(UID);
    provider
        .ensure(&spec, &env.nodes(&env.instances))
        .await
        .unwrap();
    let calls = meter.take();
    assert_eq!(
        calls.operation(kube_lb_provider_aws::calls::ops::DESCRIBE_SUBNETS.label),
        2,
        "annotation resolved by ID and by Name"
    );
    let lb = env.nlb(&name).await;
    assert_eq!(lb.scheme().unwrap().as_str(), "internal");
    assert_eq!(zone_subnets(&lb), env.subnets.iter().cloned().collect());
    let arn = lb.load_balancer_arn().unwrap().to_string();
    let ls = listeners(&env, &arn).await;
    assert_eq!((ls[0].0, ls[0].1.as_str()), (53, "UDP"));
    let tg = env
        .elbv2
        .describe_target_groups()
        .target_group_arns(&ls[0].4)
        .send()
        .await
        .unwrap();
    let tg = &tg.target_groups()[0];
    assert_eq!(tg.protocol().unwrap().as_str(), "UDP");
    assert_eq!(tg.health_check_protocol().unwrap().as_str(), "TCP");
    assert_eq!(tg.health_check_port(), Some("31053"));
    // UDP client rule; TCP health rule on the explicit port from the VPC CIDR.
    let rules = our_rules(&env, &name).await;
    assert!(rules.contains(&IngressRule::port(
        "udp",
        30053,
        "0.0.0.0/0",
        Some(&format!("kubernetes.io/rule/nlb/client={name}"))
    )));
    assert!(rules.contains(&IngressRule::port(
        "tcp",
        31053,
        "10.0.0.0/16",
        Some(&format!("kubernetes.io/rule/nlb/health={name}"))
    )));
    provider
        .ensure(&spec, &env.nodes(&env.instances))
        .await
        .unwrap();
    assert_eq!(meter.take().mutations(), 0);
    provider.delete(&spec.service).await.unwrap();
    assert!(our_rules(&env, &name).await.is_empty());
    assert!(env.target_group_names().await.is_empty());
}

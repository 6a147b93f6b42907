//! Classic ELB against moto's server: every seed annotation read back from AWS, exact call
//! counts for create / no-op resync / node changes / annotation changes, and a delete that
//! leaves nothing owned.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::{Env, Meter, lb_reads, svc};
use kube_lb_provider_aws::sg::{IngressRule, RuleSource};
use kube_lb_provider_core::CallKind;
use kube_lb_provider_core::LoadBalancerProvider;
use kube_lb_provider_core::naming::load_balancer_name;

const UID: &str = "11111111-2222-3333-4444-555555555555";

/// (protocol, LB port, instance port, certificate, policies).
type ListenerRow = (String, i32, i32, Option<String>, Vec<String>);

fn counts(pairs: &[(&'static str, u64)]) -> BTreeMap<&'static str, u64> {
    pairs.iter().copied().collect()
}

#[tokio::test]
async fn plain_clb_create_resync_nodes_and_delete_with_exact_call_counts() {
    let env = Env::start().await;
    let provider = env.provider(env.config());
    let meter = Meter::new(&provider);
    let service = svc("web", UID).port("http", 80, 30080, "TCP");
    let spec = service.spec();
    let name = load_balancer_name(UID);

    // Create: upstream needs ~17 calls (aws.md §3.1).
    let status = provider
        .ensure(&spec, &env.nodes(&env.instances))
        .await
        .unwrap();
    let host = status.ingress[0].hostname.clone().unwrap();
    assert!(host.contains(&name), "{host}");
    let create = meter.take();
    assert_eq!(
        create.operations(CallKind::Mutate),
        counts(&[
            ("ec2:AuthorizeSecurityGroupIngress", 2),
            ("ec2:CreateSecurityGroup", 1),
            ("elb:ConfigureHealthCheck", 1),
            ("elb:CreateLoadBalancer", 1),
            ("elb:RegisterInstancesWithLoadBalancer", 1),
        ])
    );
    // Instances, subnets, route tables, the ELB, one DescribeSecurityGroups for the cluster's
    // groups and the node groups together, one by name for the Service's own group (not among
    // them: an upstream group that lost its cluster tag is adopted, not created twice), plus
    // one elbv2:DescribeLoadBalancers: with no ELB found, an NLB of this Service (a kind
    // change, maybe interrupted) is removed first.
    assert_eq!(create.reads(), 7, "{:?}", create);
    assert!(create.reads() + create.mutations() < 17);

    // What AWS has now.
    let lb = &env.clb(&name).await;
    assert_eq!(lb.scheme(), Some("internet-facing"));
    let listener = lb.listener_descriptions()[0].listener().unwrap();
    assert_eq!(
        (
            listener.protocol(),
            listener.load_balancer_port(),
            listener.instance_port()
        ),
        ("TCP", 80, 30080)
    );
    let hc = lb.health_check().unwrap();
    assert_eq!(
        (
            hc.target(),
            hc.interval(),
            hc.timeout(),
            hc.healthy_threshold(),
            hc.unhealthy_threshold()
        ),
        ("TCP:30080", 10, 5, 2, 6)
    );
    let registered: BTreeSet<String> = lb
        .instances()
        .iter()
        .map(|i| i.instance_id().unwrap().to_string())
        .collect();
    assert_eq!(registered, env.instances.iter().cloned().collect());
    let lb_sg = env.groups_named(&format!("k8s-elb-{name}")).await;
    assert_eq!(lb.security_groups(), lb_sg.as_slice());
    let mut lb_rules = env.rules(&lb_sg[0]).await;
    lb_rules.sort();
    assert_eq!(
        lb_rules,
        vec![
            IngressRule::mtu("0.0.0.0/0", None),
            IngressRule::port("tcp", 80, "0.0.0.0/0", None)
        ]
    );
    assert!(
        env.rules(&env.node_sg)
            .await
            .contains(&IngressRule::from_group(&lb_sg[0]))
    );

    // No-op resync: no mutation, at most 2 reads (it is 1).
    provider
        .ensure(&spec, &env.nodes(&env.instances))
        .await
        .unwrap();
    let resync = meter.take();
    assert_eq!(resync.mutations(), 0, "{:?}", resync);
    assert_eq!(resync.reads(), 1, "{:?}", resync);

    // Node add: the registration plus one read of the LB (and one DescribeInstances for the
    // new instance ID, shared by every load balancer).
    let new = env.add_instance().await;
    let mut nodes = env.instances.clone();
    nodes.push(new.clone());
    provider.ensure(&spec, &env.nodes(&nodes)).await.unwrap();
    let add = meter.take();
    assert_eq!(
        add.operations(CallKind::Mutate),
        counts(&[("elb:RegisterInstancesWithLoadBalancer", 1)])
    );
    assert_eq!(lb_reads(&add), 1, "{:?}", add);
    assert_eq!(
        add.operation(kube_lb_provider_aws::calls::ops::DESCRIBE_INSTANCES.label),
        1
    );

    // Node removed (or excluded by the controller): only the deregistration.
    provider
        .ensure(&spec, &env.nodes(&nodes[1..]))
        .await
        .unwrap();
    let remove = meter.take();
    assert_eq!(
        remove.operations(CallKind::Mutate),
        counts(&[("elb:DeregisterInstancesFromLoadBalancer", 1)])
    );
    assert_eq!(remove.reads(), 1);
    let registered: BTreeSet<String> = env
        .clb(&name)
        .await
        .instances()
        .iter()
        .map(|i| i.instance_id().unwrap().to_string())
        .collect();
    assert_eq!(registered, nodes[1..].iter().cloned().collect());

    // Local ↔ Cluster: only the health check changes.
    let local = service.clone().local(32000).spec();
    provider
        .ensure(&local, &env.nodes(&nodes[1..]))
        .await
        .unwrap();
    let switch = meter.take();
    assert_eq!(
        switch.operations(CallKind::Mutate),
        counts(&[("elb:ConfigureHealthCheck", 1)])
    );
    assert_eq!(
        env.clb(&name).await.health_check().unwrap().target(),
        "HTTP:32000/healthz"
    );
    provider
        .ensure(&spec, &env.nodes(&nodes[1..]))
        .await
        .unwrap();
    assert_eq!(
        meter.take().operations(CallKind::Mutate),
        counts(&[("elb:ConfigureHealthCheck", 1)])
    );

    // Delete leaves nothing owned; a second delete is a no-op success.
    provider.delete(&spec.service).await.unwrap();
    assert!(provider.status(&spec.service).await.unwrap().is_none());
    assert!(
        env.groups_named(&format!("k8s-elb-{name}"))
            .await
            .is_empty()
    );
    assert!(
        !env.rules(&env.node_sg)
            .await
            .iter()
            .any(|r| r.source == RuleSource::Group(lb_sg[0].clone())),
        "node rule referencing the LB group must be gone"
    );
    provider.delete(&spec.service).await.unwrap();
}

#[tokio::test]
async fn every_clb_annotation_reaches_aws_and_changes_are_minimal() {
    let env = Env::start().await;
    let provider = env.provider(env.config());
    let meter = Meter::new(&provider);
    let extra = env
        .ec2
        .create_security_group()
        .group_name("extra")
        .description("extra")
        .vpc_id(&env.vpc)
        .send()
        .await
        .unwrap()
        .group_id()
        .unwrap()
        .to_string();
    // moto reports InstanceProtocol equal to Protocol, so the TLS port uses backend ssl
    // (SSL→SSL) to keep the read-back and the no-op resync meaningful.
    let service = svc("shop", UID)
        .port("http", 80, 30080, "TCP")
        .port("https", 443, 30443, "TCP")
        .source_range("10.0.0.0/8")
        .aws("internal", "true")
        .aws("ssl-cert", &env.cert)
        .aws("ssl-ports", "443")
        .aws("backend-protocol", "ssl")
        .aws(
            "ssl-negotiation-policy",
            "ELBSecurityPolicy-TLS-1-2-2017-01",
        )
        .aws("proxy-protocol", "*")
        .aws("access-log-enabled", "true")
        .aws("access-log-emit-interval", "5")
        .aws("access-log-s3-bucket-name", "logs")
        .aws("access-log-s3-bucket-prefix", "my-bucket-prefix/prod")
        .aws("connection-draining-enabled", "true")
        .aws("connection-draining-timeout", "45")
        .aws("connection-idle-timeout", "120")
        .aws("cross-zone-load-balancing-enabled", "true")
        .aws("additional-resource-tags", "environment=prod,owner=devops")
        .aws("healthcheck-healthy-threshold", "3")
        .aws("healthcheck-unhealthy-threshold", "4")
        .aws("healthcheck-interval", "15")
        .aws("healthcheck-timeout", "4")
        .aws("extra-security-groups", &extra);
    let spec = service.spec();
    let name = load_balancer_name(UID);
    provider
        .ensure(&spec, &env.nodes(&env.instances))
        .await
        .unwrap();
    let create = meter.take();
    assert!(create.mutations() <= 12, "{:?}", create);

    let lb = env.clb(&name).await;
    assert_eq!(lb.scheme(), Some("internal"));
    let mut listeners: Vec<ListenerRow> = lb
        .listener_descriptions()
        .iter()
        .map(|d| {
            let l = d.listener().unwrap();
            (
                l.protocol().to_string(),
                l.load_balancer_port(),
                l.instance_port(),
                l.ssl_certificate_id().map(str::to_string),
                d.policy_names().to_vec(),
            )
        })
        .collect();
    listeners.sort_by_key(|l| l.1);
    assert_eq!(
        listeners,
        vec![
            ("TCP".into(), 80, 30080, None, vec![]),
            (
                "SSL".into(),
                443,
                30443,
                Some(env.cert.clone()),
                vec!["k8s-SSLNegotiationPolicy-ELBSecurityPolicy-TLS-1-2-2017-01".into()]
            ),
        ]
    );
    let backends: BTreeMap<i32, Vec<String>> = lb
        .backend_server_descriptions()
        .iter()
        .map(|b| (b.instance_port().unwrap(), b.policy_names().to_vec()))
        .collect();
    assert_eq!(
        backends,
        BTreeMap::from([
            (30080, vec!["k8s-proxyprotocol-enabled".to_string()]),
            (30443, vec!["k8s-proxyprotocol-enabled".to_string()]),
        ])
    );
    let hc = lb.health_check().unwrap();
    assert_eq!(
        (
            hc.target(),
            hc.interval(),
            hc.timeout(),
            hc.healthy_threshold(),
            hc.unhealthy_threshold()
        ),
        ("SSL:30080", 15, 4, 3, 4)
    );
    let lb_sg = env.groups_named(&format!("k8s-elb-{name}")).await;
    assert_eq!(lb.security_groups(), &[lb_sg[0].clone(), extra.clone()]);
    let mut lb_rules = env.rules(&lb_sg[0]).await;
    lb_rules.sort();
    assert_eq!(
        lb_rules,
        vec![
            IngressRule::mtu("10.0.0.0/8", None),
            IngressRule::port("tcp", 80, "10.0.0.0/8", None),
            IngressRule::port("tcp", 443, "10.0.0.0/8", None),
        ]
    );
    assert!(
        env.rules(&extra).await.is_empty(),
        "BYO/extra groups get no rules"
    );

    let policies = env
        .elb
        .describe_load_balancer_policies()
        .load_balancer_name(&name)
        .send()
        .await
        .unwrap();
    let policy_attrs: BTreeMap<String, (String, String)> = policies
        .policy_descriptions()
        .iter()
        .map(|p| {
            let a = &p.policy_attribute_descriptions()[0];
            (
                p.policy_name().unwrap().to_string(),
                (
                    a.attribute_name().unwrap().to_string(),
                    a.attribute_value().unwrap().to_string(),
                ),
            )
        })
        .collect();
    assert_eq!(
        policy_attrs,
        BTreeMap::from([
            (
                "k8s-proxyprotocol-enabled".to_string(),
                ("ProxyProtocol".to_string(), "true".to_string())
            ),
            (
                "k8s-SSLNegotiationPolicy-ELBSecurityPolicy-TLS-1-2-2017-01".to_string(),
                (
                    "Reference-Security-Policy".to_string(),
                    "ELBSecurityPolicy-TLS-1-2-2017-01".to_string()
                )
            ),
        ])
    );

    let attrs = env
        .elb
        .describe_load_balancer_attributes()
        .load_balancer_name(&name)
        .send()
        .await
        .unwrap();
    let attrs = attrs.load_balancer_attributes().unwrap();
    assert!(attrs.cross_zone_load_balancing().unwrap().enabled());
    let log = attrs.access_log().unwrap();
    assert!(log.enabled());
    assert_eq!(log.s3_bucket_name(), Some("logs"));
    assert_eq!(log.s3_bucket_prefix(), Some("my-bucket-prefix/prod"));
    assert_eq!(log.emit_interval(), Some(5));
    let draining = attrs.connection_draining().unwrap();
    assert_eq!((draining.enabled(), draining.timeout()), (true, Some(45)));
    assert_eq!(attrs.connection_settings().unwrap().idle_timeout(), 120);

    let tags = env
        .elb
        .describe_tags()
        .load_balancer_names(&name)
        .send()
        .await
        .unwrap();
    let tags: BTreeMap<String, String> = tags.tag_descriptions()[0]
        .tags()
        .iter()
        .map(|t| (t.key().to_string(), t.value().unwrap().to_string()))
        .collect();
    assert_eq!(tags.get("environment").map(String::as_str), Some("prod"));
    assert_eq!(tags.get("owner").map(String::as_str), Some("devops"));
    assert_eq!(
        tags.get(common::CLUSTER_TAG).map(String::as_str),
        Some("owned")
    );
    assert_eq!(
        tags.get("kubernetes.io/service-name").map(String::as_str),
        Some("default/shop")
    );

    // No-op resync.
    provider
        .ensure(&spec, &env.nodes(&env.instances))
        .await
        .unwrap();
    let resync = meter.take();
    assert_eq!(resync.mutations(), 0, "{:?}", resync);
    assert!(resync.reads() <= 2);

    // Annotation changes → exactly the calls they need.
    let changed_spec = service
        .clone()
        .aws("connection-idle-timeout", "300")
        .aws("additional-resource-tags", "environment=prod")
        .without("proxy-protocol")
        .spec();
    provider
        .ensure(&changed_spec, &env.nodes(&env.instances))
        .await
        .unwrap();
    let update = meter.take();
    assert_eq!(
        update.operations(CallKind::Mutate),
        counts(&[
            ("elb:DeleteLoadBalancerPolicy", 1),
            ("elb:ModifyLoadBalancerAttributes", 1),
            ("elb:RemoveTags", 1),
            ("elb:AddTags", 1),
            ("elb:SetLoadBalancerPoliciesForBackendServer", 2),
        ])
    );
    let tags = env
        .elb
        .describe_tags()
        .load_balancer_names(&name)
        .send()
        .await
        .unwrap();
    let keys: BTreeSet<String> = tags.tag_descriptions()[0]
        .tags()
        .iter()
        .map(|t| t.key().to_string())
        .collect();
    assert!(
        keys.contains("environment") && !keys.contains("owner"),
        "{keys:?}"
    );
    provider
        .ensure(&changed_spec, &env.nodes(&env.instances))
        .await
        .unwrap();
    assert_eq!(meter.take().mutations(), 0);

    provider.delete(&spec.service).await.unwrap();
    assert!(
        env.groups_named(&format!("k8s-elb-{name}"))
            .await
            .is_empty()
    );
    let gone = env
        .elb
        .describe_load_balancers()
        .load_balancer_names(&name)
        .send()
        .await;
    assert!(gone.is_err(), "load balancer must be gone");
    assert!(
        !env.rules(&env.node_sg)
            .await
            .iter()
            .any(|r| r.source == RuleSource::Group(lb_sg[0].clone()))
    );
    let extra_exists = env
        .ec2
        .describe_security_groups()
        .group_ids(&extra)
        .send()
        .await
        .unwrap();
    assert_eq!(
        extra_exists.security_groups().len(),
        1,
        "extra groups are never deleted"
    );
}

#[tokio::test]
async fn adopts_a_load_balancer_the_upstream_provider_created() {
    let env = Env::start().await;
    let name = load_balancer_name(UID);
    // What the upstream provider leaves: same name, a listener, no health check configured.
    env.elb
        .create_load_balancer()
        .load_balancer_name(&name)
        .listeners(
            aws_sdk_elasticloadbalancing::types::Listener::builder()
                .protocol("TCP")
                .load_balancer_port(80)
                .instance_protocol("TCP")
                .instance_port(30080)
                .build()
                .unwrap(),
        )
        .subnets(&env.subnets[0])
        .subnets(&env.subnets[1])
        .send()
        .await
        .unwrap();
    let provider = env.provider(env.config());
    let meter = Meter::new(&provider);
    let spec = svc("web", UID).port("http", 80, 30080, "TCP").spec();
    provider
        .ensure(&spec, &env.nodes(&env.instances))
        .await
        .unwrap();
    let calls = meter.take();
    assert_eq!(
        calls.operation(kube_lb_provider_aws::calls::ops::ELB_CREATE_LOAD_BALANCER.label),
        0
    );
    let all = env.elb.describe_load_balancers().send().await.unwrap();
    assert_eq!(
        all.load_balancer_descriptions().len(),
        1,
        "adopted, not duplicated"
    );
    provider.delete(&spec.service).await.unwrap();
}

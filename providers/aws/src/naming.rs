//! Names and descriptions shared with the upstream AWS provider (reference aws.md §2), so that
//! resources it created are found and adopted, and ours look familiar to its users.

use sha1::{Digest, Sha1};

use kube_lb_annotations::ServiceKey;

/// Name of the per-LB Classic ELB security group.
pub fn clb_security_group_name(lb_name: &str) -> String {
    format!("k8s-elb-{lb_name}")
}

/// Description of the per-LB Classic ELB security group.
pub fn clb_security_group_description(lb_name: &str, service: &ServiceKey) -> String {
    format!("Security group for Kubernetes ELB {lb_name} ({service})")
}

/// CLB proxy-protocol policy name.
pub const PROXY_PROTOCOL_POLICY: &str = "k8s-proxyprotocol-enabled";

/// Prefix of the CLB SSL negotiation policies kube-lb (and upstream) create.
pub const SSL_NEGOTIATION_POLICY_PREFIX: &str = "k8s-SSLNegotiationPolicy-";

/// CLB SSL negotiation policy name for a predefined AWS policy.
pub fn ssl_negotiation_policy_name(reference: &str) -> String {
    format!("{SSL_NEGOTIATION_POLICY_PREFIX}{reference}")
}

/// True for policy names this provider manages on a Classic ELB.
pub fn is_managed_policy(name: &str) -> bool {
    name == PROXY_PROTOCOL_POLICY || name.starts_with(SSL_NEGOTIATION_POLICY_PREFIX)
}

/// Prefix of the descriptions of NLB node security-group rules.
pub const NLB_RULE_PREFIX: &str = "kubernetes.io/rule/nlb/";

/// Which NLB node rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NlbRuleKind {
    /// Health checks from the VPC.
    Health,
    /// Client traffic from the source ranges.
    Client,
    /// ICMP path-MTU discovery from the source ranges.
    Mtu,
}

impl NlbRuleKind {
    fn word(self) -> &'static str {
        match self {
            NlbRuleKind::Health => "health",
            NlbRuleKind::Client => "client",
            NlbRuleKind::Mtu => "mtu",
        }
    }
}

/// `kubernetes.io/rule/nlb/<kind>=<lb>` (seed 001 table).
pub fn nlb_rule_description(kind: NlbRuleKind, lb_name: &str) -> String {
    format!("{NLB_RULE_PREFIX}{}={lb_name}", kind.word())
}

/// Parses a rule description into (kind, lb name).
pub fn parse_nlb_rule_description(description: &str) -> Option<(NlbRuleKind, &str)> {
    let rest = description.strip_prefix(NLB_RULE_PREFIX)?;
    let (word, lb) = rest.split_once('=')?;
    let kind = [NlbRuleKind::Health, NlbRuleKind::Client, NlbRuleKind::Mtu]
        .into_iter()
        .find(|k| k.word() == word)?;
    Some((kind, lb))
}

/// Keeps ASCII alphanumerics and cuts to 8 characters, as upstream and LBC do.
fn sanitize8(value: &str) -> String {
    value
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect()
}

/// `k8s-<ns8>-<name8>-`: every target group of a Service starts with this.
pub fn target_group_prefix(service: &ServiceKey) -> String {
    format!(
        "k8s-{}-{}-",
        sanitize8(&service.namespace),
        sanitize8(&service.name)
    )
}

/// Inputs of the upstream target-group name hash.
#[derive(Debug, Clone, Copy)]
pub struct TargetGroupNameInput<'a> {
    /// Cluster ID.
    pub cluster_id: &'a str,
    /// Service port.
    pub service_port: u16,
    /// Node port (the target-group port).
    pub node_port: u16,
    /// `TCP`, `UDP` or `TLS`.
    pub target_protocol: &'a str,
    /// Health-check protocol.
    pub health_check_protocol: &'a str,
    /// Health-check interval.
    pub health_check_interval: u32,
}

/// Upstream's deterministic target-group name: `k8s-<ns8>-<name8>-<sha1(...)[:10]>`.
pub fn target_group_name(service: &ServiceKey, input: TargetGroupNameInput<'_>) -> String {
    let mut hasher = Sha1::new();
    hasher.update(input.cluster_id.as_bytes());
    hasher.update(service.namespace.as_bytes());
    hasher.update(service.name.as_bytes());
    hasher.update(input.service_port.to_string().as_bytes());
    hasher.update(input.node_port.to_string().as_bytes());
    hasher.update(input.target_protocol.as_bytes());
    hasher.update(b"instance");
    hasher.update(input.health_check_protocol.as_bytes());
    hasher.update(input.health_check_interval.to_string().as_bytes());
    let digest = hasher.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}{}", target_group_prefix(service), &hex[..10])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(ns: &str, name: &str) -> ServiceKey {
        ServiceKey {
            namespace: ns.into(),
            name: name.into(),
            uid: "u".into(),
        }
    }

    #[test]
    fn target_group_names_are_deterministic_and_short() {
        let input = TargetGroupNameInput {
            cluster_id: "c",
            service_port: 80,
            node_port: 30080,
            target_protocol: "TCP",
            health_check_protocol: "TCP",
            health_check_interval: 30,
        };
        let a = target_group_name(&svc("kube-system", "my.long-service-name"), input);
        assert_eq!(
            a,
            target_group_name(&svc("kube-system", "my.long-service-name"), input)
        );
        assert!(a.starts_with("k8s-kubesyst-mylongse-"), "{a}");
        assert_eq!(a.len(), "k8s-kubesyst-mylongse-".len() + 10);
        assert!(a.len() <= 32);
        let other = TargetGroupNameInput {
            health_check_interval: 10,
            ..input
        };
        assert_ne!(
            a,
            target_group_name(&svc("kube-system", "my.long-service-name"), other)
        );
    }

    #[test]
    fn rule_descriptions_round_trip() {
        for kind in [NlbRuleKind::Health, NlbRuleKind::Client, NlbRuleKind::Mtu] {
            let d = nlb_rule_description(kind, "abc");
            assert_eq!(parse_nlb_rule_description(&d), Some((kind, "abc")));
        }
        assert_eq!(
            parse_nlb_rule_description("kubernetes.io/rule/nlb/mtu"),
            None
        );
        assert_eq!(parse_nlb_rule_description("other"), None);
    }

    #[test]
    fn managed_policies() {
        assert!(is_managed_policy(PROXY_PROTOCOL_POLICY));
        assert!(is_managed_policy(&ssl_negotiation_policy_name(
            "ELBSecurityPolicy-2016-08"
        )));
        assert!(!is_managed_policy("ELBSecurityPolicy-2016-08"));
    }
}

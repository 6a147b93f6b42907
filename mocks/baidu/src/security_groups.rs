//! Security groups (BCC/VPC API v2, `/v2/securityGroup…`) and their binding to BLBs (BLB API
//! v1, `/v1/blb/{id}/securitygroup?bind|unbind`), as BCE serves them: a group is a set of
//! allow rules (ingress and egress) with ids, made with its rules in one create, changed rule
//! by rule (`authorizeRule`, `revokeRule`, `DELETE /v2/securityGroup/rule/{id}`), and not
//! deletable while a BLB uses it (409
//! `SecurityGroup.InstancesAssociatedSecurityGroupCanNotBeDeleted`).
//!
//! Traffic is judged as BCE documents it for a BLB: with no group bound every source reaches
//! the listeners; with groups bound, a packet passes when any ingress rule of any bound group
//! allows its source, protocol and port (rules only allow; what none allows is dropped), and
//! rules are stateful (replies need no egress rule). See [`State::would_reach`].

use std::net::IpAddr;

use serde_json::{Value, json};

use crate::state::{ApiError, State};

/// Largest number of groups bound to one BLB.
const MAX_BOUND: usize = 5;

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    pub id: String,
    pub remark: String,
    pub direction: String,
    pub ethertype: String,
    pub protocol: String,
    pub port_range: String,
    pub source_ip: String,
    pub dest_ip: String,
}

impl Rule {
    /// The fields that make a rule what it is (BCE refuses a second rule with the same ones).
    fn identity(&self) -> (&str, &str, &str, &str, &str, &str) {
        (
            &self.direction,
            &self.ethertype,
            &self.protocol,
            &self.port_range,
            &self.source_ip,
            &self.dest_ip,
        )
    }

    fn to_json(&self, group: &str) -> Value {
        json!({
            "securityGroupRuleId": self.id,
            "remark": self.remark,
            "direction": self.direction,
            "ethertype": self.ethertype,
            "protocol": self.protocol,
            "portRange": self.port_range,
            "sourceGroupId": "",
            "sourceIp": if self.direction == "ingress" { self.source_ip.as_str() } else { "" },
            "destGroupId": "",
            "destIp": if self.direction == "egress" { self.dest_ip.as_str() } else { "" },
            "securityGroupId": group,
            "createdTime": "2026-01-01T00:00:00Z",
            "updatedTime": "2026-01-01T00:00:00Z",
        })
    }

    /// The rule as the BLB's `DescribeSecurityGroups` shows it (its own field spelling).
    fn to_blb_json(&self) -> Value {
        json!({
            "securityGroupRuleId": self.id,
            "direction": self.direction,
            "ethertype": self.ethertype,
            "portRange": self.port_range,
            "protocol": self.protocol,
            "sourcegroupId": "",
            "sourceIp": if self.direction == "ingress" { self.source_ip.as_str() } else { "" },
            "destgroupId": "",
            "destIp": if self.direction == "egress" { self.dest_ip.as_str() } else { "" },
        })
    }

    /// A rule from a request body (`rules[]` of a create, `rule` of `authorizeRule`).
    fn parse(item: &Value, id: String) -> Result<Rule, ApiError> {
        let text = |key: &str| -> Result<String, ApiError> {
            match item.get(key) {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(ApiError::invalid(format!("{key} must be a string"))),
            }
        };
        let direction = text("direction")?;
        if direction != "ingress" && direction != "egress" {
            return Err(ApiError::invalid("direction must be ingress or egress"));
        }
        let ethertype = match text("ethertype")?.as_str() {
            "" | "IPv4" => "IPv4".to_string(),
            "IPv6" => "IPv6".to_string(),
            other => {
                return Err(ApiError::invalid(format!(
                    "ethertype {other} is not IPv4 or IPv6"
                )));
            }
        };
        let protocol = text("protocol")?.to_lowercase();
        if !["", "all", "tcp", "udp", "icmp"].contains(&protocol.as_str()) {
            return Err(ApiError::invalid(format!(
                "protocol {protocol} is not tcp, udp, icmp or all"
            )));
        }
        let port_range = text("portRange")?;
        if port_matches(&port_range, 0).is_none() {
            return Err(ApiError::invalid(format!(
                "portRange {port_range} is not a port or a range a-b"
            )));
        }
        let source_ip = text("sourceIp")?;
        let dest_ip = text("destIp")?;
        for address in [&source_ip, &dest_ip] {
            if !address.is_empty()
                && address != "all"
                && parse_cidr(address).is_none_or(|(a, _)| a.is_ipv6() != (ethertype == "IPv6"))
            {
                return Err(ApiError::invalid(format!(
                    "{address} is not an {ethertype} address or CIDR"
                )));
            }
        }
        Ok(Rule {
            id,
            remark: text("remark")?,
            direction,
            ethertype,
            protocol,
            port_range,
            source_ip,
            dest_ip,
        })
    }

    fn allows(&self, source: IpAddr, protocol: &str, port: u16) -> bool {
        let all = |s: &str| s.is_empty() || s == "all";
        self.direction == "ingress"
            && (self.ethertype == "IPv6") == source.is_ipv6()
            && (all(&self.protocol) || self.protocol.eq_ignore_ascii_case(protocol))
            && port_matches(&self.port_range, port) == Some(true)
            && (all(&self.source_ip)
                || parse_cidr(&self.source_ip).is_some_and(|(net, len)| contains(net, len, source)))
    }
}

/// A security group.
#[derive(Debug, Clone)]
pub(crate) struct SecurityGroup {
    pub id: String,
    pub name: String,
    pub desc: String,
    pub vpc_id: String,
    pub tags: Value,
    pub rules: Vec<Rule>,
    pub version: u64,
}

impl SecurityGroup {
    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "name": self.name,
            "vpcId": self.vpc_id,
            "desc": self.desc,
            "rules": self.rules.iter().map(|r| r.to_json(&self.id)).collect::<Vec<_>>(),
            "tags": self.tags,
            "createdTime": "2026-01-01T00:00:00Z",
            "sgVersion": self.version,
        })
    }
}

/// `Some(true)` when `spec` (empty: every port, `80`, `1000-2000`) covers `port`; `None`
/// when it is not a port specification.
fn port_matches(spec: &str, port: u16) -> Option<bool> {
    if spec.is_empty() {
        return Some(true);
    }
    let (low, high) = match spec.split_once('-') {
        Some((low, high)) => (
            low.trim().parse::<u16>().ok()?,
            high.trim().parse::<u16>().ok()?,
        ),
        None => {
            let only = spec.trim().parse::<u16>().ok()?;
            (only, only)
        }
    };
    (low <= high).then_some((low..=high).contains(&port))
}

fn parse_cidr(text: &str) -> Option<(IpAddr, u8)> {
    let (address, length) = match text.split_once('/') {
        Some((a, l)) => (a.parse::<IpAddr>().ok()?, l.parse::<u8>().ok()?),
        None => {
            let a = text.parse::<IpAddr>().ok()?;
            (a, if a.is_ipv4() { 32 } else { 128 })
        }
    };
    let max = if address.is_ipv4() { 32 } else { 128 };
    (length <= max).then_some((address, length))
}

fn contains(net: IpAddr, length: u8, address: IpAddr) -> bool {
    let (net, address, bits) = match (net, address) {
        (IpAddr::V4(n), IpAddr::V4(a)) => (u128::from(n.to_bits()), u128::from(a.to_bits()), 32),
        (IpAddr::V6(n), IpAddr::V6(a)) => (n.to_bits(), a.to_bits(), 128),
        _ => return false,
    };
    if length == 0 {
        return true;
    }
    let shift = bits - u32::from(length);
    (net >> shift) == (address >> shift)
}

fn group_not_found(id: &str) -> ApiError {
    ApiError::not_found(format!("security group {id}"))
}

/// `securityGroupIds` of a bind / unbind body.
fn group_ids(body: &Value) -> Result<Vec<String>, ApiError> {
    match body.get("securityGroupIds") {
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ApiError::invalid("securityGroupIds must be strings"))
            })
            .collect(),
        _ => Err(ApiError::invalid(
            "securityGroupIds must be a non-empty list",
        )),
    }
}

impl State {
    /// `POST /v2/securityGroup`: a group with its rules; answers `{"securityGroupId"}`.
    pub(crate) fn create_security_group(&mut self, body: &Value) -> Result<Value, ApiError> {
        let name = body.get("name").and_then(Value::as_str).unwrap_or_default();
        if name.is_empty() || name.chars().count() > 65 {
            return Err(ApiError::invalid("name must be 1 to 65 characters"));
        }
        let desc = body.get("desc").and_then(Value::as_str).unwrap_or_default();
        if desc.chars().count() > 200 {
            return Err(ApiError::invalid("desc must be at most 200 characters"));
        }
        let vpc_id = match body.get("vpcId").and_then(Value::as_str) {
            Some(vpc) if self.config.subnets.values().any(|(v, _)| v == vpc) => vpc.to_string(),
            Some(vpc) => return Err(ApiError::not_found(format!("VPC {vpc}"))),
            None => self
                .config
                .subnets
                .values()
                .next()
                .map(|(v, _)| v.clone())
                .unwrap_or_default(),
        };
        let tags = match body.get("tags") {
            None | Some(Value::Null) => Value::Array(Vec::new()),
            Some(tags @ Value::Array(_)) => tags.clone(),
            Some(_) => return Err(ApiError::invalid("tags must be a list")),
        };
        let mut rules = Vec::new();
        for item in body
            .get("rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let id = format!("r-{:08x}", self.fresh_id());
            let rule = Rule::parse(item, id)?;
            if !rules.iter().any(|r: &Rule| r.identity() == rule.identity()) {
                rules.push(rule);
            }
        }
        if self.security_groups.len() >= self.config.quotas.security_groups {
            return Err(ApiError::quota("security group quota exceeded"));
        }
        let id = format!("g-{:08x}", self.fresh_id());
        self.security_groups.insert(
            id.clone(),
            SecurityGroup {
                id: id.clone(),
                name: name.to_string(),
                desc: desc.to_string(),
                vpc_id,
                tags,
                rules,
                version: 1,
            },
        );
        Ok(json!({"securityGroupId": id}))
    }

    /// `GET /v2/securityGroup`, filtered by `vpcId` and `securityGroupId`, paged by marker.
    pub(crate) fn list_security_groups(
        &self,
        vpc_id: Option<&str>,
        group_id: Option<&str>,
    ) -> Vec<(String, Value)> {
        self.security_groups
            .values()
            .filter(|g| vpc_id.is_none_or(|v| v.is_empty() || g.vpc_id == v))
            .filter(|g| group_id.is_none_or(|id| id.is_empty() || g.id == id))
            .map(|g| (g.id.clone(), g.to_json()))
            .collect()
    }

    /// `DELETE /v2/securityGroup/{id}`.
    pub(crate) fn delete_security_group(&mut self, id: &str) -> Result<Value, ApiError> {
        if !self.security_groups.contains_key(id) {
            return Err(group_not_found(id));
        }
        if self
            .blbs
            .values()
            .any(|b| b.security_groups.iter().any(|g| g == id))
        {
            return Err(ApiError::new(
                409,
                "SecurityGroup.InstancesAssociatedSecurityGroupCanNotBeDeleted",
                "Security group can't be deleted while instance associated.",
            ));
        }
        self.security_groups.remove(id);
        Ok(json!({}))
    }

    /// `PUT /v2/securityGroup/{id}?authorizeRule` (`revoke`: `?revokeRule`) with `{"rule"}`.
    pub(crate) fn change_rule(
        &mut self,
        id: &str,
        body: &Value,
        revoke: bool,
    ) -> Result<Value, ApiError> {
        let rule_id = format!("r-{:08x}", self.fresh_id());
        let rule = Rule::parse(body.get("rule").unwrap_or(&Value::Null), rule_id)?;
        let group = self
            .security_groups
            .get_mut(id)
            .ok_or_else(|| group_not_found(id))?;
        let at = group
            .rules
            .iter()
            .position(|r| r.identity() == rule.identity());
        match (at, revoke) {
            (Some(_), false) => {
                return Err(ApiError::new(
                    409,
                    "DuplicateRule",
                    "The security group rule already exists.",
                ));
            }
            (None, false) => group.rules.push(rule),
            (Some(at), true) => {
                group.rules.remove(at);
            }
            (None, true) => return Err(ApiError::not_found("security group rule")),
        }
        group.version += 1;
        Ok(json!({}))
    }

    /// `DELETE /v2/securityGroup/rule/{ruleId}`.
    pub(crate) fn delete_rule(&mut self, rule_id: &str) -> Result<Value, ApiError> {
        for group in self.security_groups.values_mut() {
            if let Some(at) = group.rules.iter().position(|r| r.id == rule_id) {
                group.rules.remove(at);
                group.version += 1;
                return Ok(json!({}));
            }
        }
        Err(ApiError::not_found(format!(
            "security group rule {rule_id}"
        )))
    }

    /// `PUT /v1/blb/{id}/securitygroup?bind` (`unbind`) with `{"securityGroupIds"}`.
    pub(crate) fn bind_security_groups(
        &mut self,
        blb_id: &str,
        body: &Value,
        bind: bool,
    ) -> Result<Value, ApiError> {
        let ids = group_ids(body)?;
        self.check_available(blb_id)?;
        if let Some(missing) = ids.iter().find(|g| !self.security_groups.contains_key(*g)) {
            return Err(group_not_found(missing));
        }
        let Some(blb) = self.blbs.get_mut(blb_id) else {
            return Err(ApiError::not_found(format!("BLB {blb_id}")));
        };
        if let Some(other) = ids
            .iter()
            .filter_map(|id| self.security_groups.get(id))
            .find(|g| g.vpc_id != blb.vpc_id)
        {
            return Err(ApiError::invalid(format!(
                "security group {} is not in the BLB's VPC",
                other.id
            )));
        }
        if bind {
            for id in ids {
                if !blb.security_groups.contains(&id) {
                    blb.security_groups.push(id);
                }
            }
            if blb.security_groups.len() > MAX_BOUND {
                blb.security_groups.truncate(MAX_BOUND);
                return Err(ApiError::quota(format!(
                    "at most {MAX_BOUND} security groups can be bound to a BLB"
                )));
            }
        } else {
            blb.security_groups.retain(|g| !ids.contains(g));
        }
        self.touch(blb_id);
        Ok(json!({}))
    }

    /// `GET /v1/blb/{id}/securitygroup`: `{"blbSecurityGroups": [...]}`.
    pub(crate) fn blb_security_groups(&self, blb_id: &str) -> Result<Value, ApiError> {
        let blb = self
            .blbs
            .get(blb_id)
            .ok_or_else(|| ApiError::not_found(format!("BLB {blb_id}")))?;
        let groups: Vec<Value> = blb
            .security_groups
            .iter()
            .filter_map(|id| self.security_groups.get(id))
            .map(|g| {
                json!({
                    "securityGroupId": g.id,
                    "securityGroupName": g.name,
                    "securityGroupDesc": g.desc,
                    "vpcName": g.vpc_id,
                    "securityGroupRules": g.rules.iter().map(Rule::to_blb_json).collect::<Vec<_>>(),
                })
            })
            .collect();
        Ok(json!({"blbSecurityGroups": groups}))
    }

    /// Would a packet from `source` reach listener `protocol`/`port` of BLB `blb_id`? The BLB
    /// and the listener must exist; then, with no group bound, yes; with groups bound, when
    /// any ingress rule of any of them allows it.
    pub fn would_reach(&self, blb_id: &str, source: IpAddr, protocol: &str, port: u16) -> bool {
        let Some(blb) = self.blbs.get(blb_id) else {
            return false;
        };
        if !blb
            .listeners
            .get(&port)
            .is_some_and(|l| l.protocol.eq_ignore_ascii_case(protocol))
        {
            return false;
        }
        if blb.security_groups.is_empty() {
            return true;
        }
        blb.security_groups
            .iter()
            .filter_map(|id| self.security_groups.get(id))
            .flat_map(|g| g.rules.iter())
            .any(|r| r.allows(source, protocol, port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_and_sources_match_as_bce_reads_them() {
        assert_eq!(port_matches("", 9), Some(true));
        assert_eq!(port_matches("80", 80), Some(true));
        assert_eq!(port_matches("1-100", 101), Some(false));
        assert_eq!(port_matches("80,443", 80), None);
        let rule = Rule::parse(
            &json!({"direction": "ingress", "protocol": "tcp", "portRange": "80",
                    "sourceIp": "143.231.0.0/16"}),
            "r".into(),
        )
        .unwrap();
        assert!(rule.allows("143.231.1.1".parse().unwrap(), "TCP", 80));
        assert!(!rule.allows("143.232.1.1".parse().unwrap(), "TCP", 80));
        assert!(!rule.allows("143.231.1.1".parse().unwrap(), "UDP", 80));
    }
}

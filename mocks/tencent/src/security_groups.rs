//! VPC security groups (API `2017-03-12`, service `vpc`) and their binding to CLBs
//! (`SetLoadBalancerSecurityGroups`, `DescribeLoadBalancers`' `SecureGroups`), as the cloud
//! serves them: groups with tags, ingress and egress policies in order (`PolicyIndex` from
//! 0), a `Version` counting the changes, `DeleteSecurityGroup` refused while a CLB uses the
//! group (`ResourceInUse`).
//!
//! Traffic is judged as Tencent documents it for a CLB: with no group bound every source
//! reaches the listeners; with groups bound, the groups are read in their bound order and
//! each group's ingress policies in order, the first policy matching the packet decides
//! (`ACCEPT` or `DROP`), and a packet no policy matches is dropped. Policies are stateful:
//! replies need no egress policy. See [`State::would_reach`].

use std::net::IpAddr;

use serde_json::{Map, Value, json};

use crate::state::{ApiError, Reply, State};

/// Largest number of groups bound to one CLB (`SetLoadBalancerSecurityGroups`).
const MAX_BOUND: usize = 50;

/// One policy of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// `TCP`, `UDP`, `ICMP`, `ICMPv6` or `ALL`.
    pub protocol: String,
    /// `ALL`, a port, ports `80,443` or a range `1000-2000`.
    pub port: String,
    /// An IPv4 source (`CidrBlock`).
    pub cidr_block: Option<String>,
    /// An IPv6 source (`Ipv6CidrBlock`).
    pub ipv6_cidr_block: Option<String>,
    /// `ACCEPT` or `DROP`.
    pub action: String,
    /// `PolicyDescription`.
    pub description: String,
}

impl Policy {
    fn to_json(&self, index: usize) -> Value {
        json!({
            "PolicyIndex": index,
            "Protocol": self.protocol,
            "Port": self.port,
            "CidrBlock": self.cidr_block.clone().unwrap_or_default(),
            "Ipv6CidrBlock": self.ipv6_cidr_block.clone().unwrap_or_default(),
            "SecurityGroupId": "",
            "Action": self.action,
            "PolicyDescription": self.description,
            "ModifyTime": "2026-01-01 00:00:00",
            "ServiceTemplate": {"ServiceId": "", "ServiceGroupId": ""},
            "AddressTemplate": {"AddressId": "", "AddressGroupId": ""},
            "Priority": index + 1,
        })
    }

    fn parse(item: &Value) -> Result<Policy, ApiError> {
        let Some(item) = item.as_object() else {
            return Err(invalid("SecurityGroupPolicySet", "policies are objects"));
        };
        let text = |key: &str| -> Result<Option<String>, ApiError> {
            match item.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.is_empty() => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(invalid(key, "must be a String")),
            }
        };
        if let Some(key) = item.keys().find(|k| !POLICY_KEYS.contains(&k.as_str())) {
            return Err(ApiError::new(
                "UnknownParameter",
                format!("The parameter `SecurityGroupPolicySet.{key}` is not recognized."),
            ));
        }
        let protocol = text("Protocol")?
            .unwrap_or_else(|| "ALL".into())
            .to_uppercase();
        if !["TCP", "UDP", "ICMP", "ICMPV6", "ALL"].contains(&protocol.as_str()) {
            return Err(invalid("Protocol", "must be TCP, UDP, ICMP, ICMPv6 or ALL"));
        }
        let port = text("Port")?.unwrap_or_else(|| "ALL".into());
        if port_matches(&port, 0).is_none() {
            return Err(invalid(
                "Port",
                "must be ALL, a port, ports a,b or a range a-b",
            ));
        }
        if port != "ALL" && !["TCP", "UDP"].contains(&protocol.as_str()) {
            return Err(invalid("Port", "ports go with TCP or UDP only"));
        }
        let cidr_block = text("CidrBlock")?;
        let ipv6_cidr_block = text("Ipv6CidrBlock")?;
        match (&cidr_block, &ipv6_cidr_block) {
            (Some(_), Some(_)) => {
                return Err(ApiError::new(
                    "InvalidParameter.Coexist",
                    "CidrBlock and Ipv6CidrBlock cannot be given together.",
                ));
            }
            (None, None) => {
                return Err(ApiError::new(
                    "MissingParameter",
                    "A policy needs a CidrBlock or an Ipv6CidrBlock.",
                ));
            }
            (Some(cidr), None) if !parse_cidr(cidr).is_some_and(|(a, _)| a.is_ipv4()) => {
                return Err(invalid("CidrBlock", "is not an IPv4 CIDR"));
            }
            (None, Some(cidr)) if !parse_cidr(cidr).is_some_and(|(a, _)| a.is_ipv6()) => {
                return Err(invalid("Ipv6CidrBlock", "is not an IPv6 CIDR"));
            }
            _ => {}
        }
        let action = text("Action")?
            .ok_or_else(|| ApiError::new("MissingParameter", "A policy needs an Action."))?
            .to_uppercase();
        if action != "ACCEPT" && action != "DROP" {
            return Err(invalid("Action", "must be ACCEPT or DROP"));
        }
        Ok(Policy {
            protocol,
            port,
            cidr_block,
            ipv6_cidr_block,
            action,
            description: text("PolicyDescription")?.unwrap_or_default(),
        })
    }

    /// Does this policy match a packet from `source` to `protocol`/`port`?
    fn matches(&self, source: IpAddr, protocol: &str, port: u16) -> bool {
        let cidr = if source.is_ipv4() {
            &self.cidr_block
        } else {
            &self.ipv6_cidr_block
        };
        (self.protocol == "ALL" || self.protocol == protocol)
            && port_matches(&self.port, port) == Some(true)
            && cidr
                .as_deref()
                .and_then(parse_cidr)
                .is_some_and(|(net, len)| contains(net, len, source))
    }
}

/// The keys a `SecurityGroupPolicy` may have as input.
const POLICY_KEYS: &[&str] = &[
    "PolicyIndex",
    "Protocol",
    "Port",
    "ServiceTemplate",
    "CidrBlock",
    "Ipv6CidrBlock",
    "SecurityGroupId",
    "AddressTemplate",
    "Action",
    "PolicyDescription",
    "ModifyTime",
    "Priority",
];

/// A security group.
#[derive(Debug, Clone)]
pub struct SecurityGroup {
    /// `sg-…`.
    pub id: String,
    /// `SecurityGroupName`.
    pub name: String,
    /// `SecurityGroupDesc`.
    pub description: String,
    /// Tags in order.
    pub tags: Vec<(String, String)>,
    /// Ingress policies in order.
    pub ingress: Vec<Policy>,
    /// Egress policies in order.
    pub egress: Vec<Policy>,
    /// Bumped at every change of the policies.
    pub version: u64,
}

impl SecurityGroup {
    fn to_json(&self) -> Value {
        json!({
            "SecurityGroupId": self.id,
            "SecurityGroupName": self.name,
            "SecurityGroupDesc": self.description,
            "ProjectId": "0",
            "IsDefault": false,
            "CreatedTime": "2026-01-01 00:00:00",
            "UpdateTime": "2026-01-01 00:00:00",
            "TagSet": self.tags.iter().map(|(k, v)| json!({"Key": k, "Value": v})).collect::<Vec<_>>(),
        })
    }

    fn policies_json(&self) -> Value {
        let list = |policies: &[Policy]| -> Vec<Value> {
            policies
                .iter()
                .enumerate()
                .map(|(i, p)| p.to_json(i))
                .collect()
        };
        json!({
            "Version": self.version.to_string(),
            "Ingress": list(&self.ingress),
            "Egress": list(&self.egress),
            "PolicyStatistics": {
                "IngressIPv4TotalCount": self.ingress.iter().filter(|p| p.cidr_block.is_some()).count(),
                "IngressIPv6TotalCount": self.ingress.iter().filter(|p| p.ipv6_cidr_block.is_some()).count(),
                "EgressIPv4TotalCount": self.egress.iter().filter(|p| p.cidr_block.is_some()).count(),
                "EgressIPv6TotalCount": self.egress.iter().filter(|p| p.ipv6_cidr_block.is_some()).count(),
                "TotalCount": self.ingress.len() + self.egress.len(),
            },
        })
    }
}

fn invalid(key: &str, message: &str) -> ApiError {
    ApiError::new(
        "InvalidParameterValue",
        format!("The value of `{key}` is invalid: {message}."),
    )
}

fn group_not_found(id: &str) -> ApiError {
    ApiError::new(
        "InvalidSecurityGroupID.NotFound",
        format!("The security group `{id}` does not exist."),
    )
}

/// `Some(true)` when `spec` (`ALL`, `80`, `80,443`, `1000-2000`) covers `port`, `None` when
/// `spec` is not a port specification.
fn port_matches(spec: &str, port: u16) -> Option<bool> {
    if spec.eq_ignore_ascii_case("ALL") {
        return Some(true);
    }
    if let Some((low, high)) = spec.split_once('-') {
        let (low, high): (u16, u16) = (low.trim().parse().ok()?, high.trim().parse().ok()?);
        return (low <= high).then_some((low..=high).contains(&port));
    }
    let mut hit = false;
    for item in spec.split(',') {
        let value: u16 = item.trim().parse().ok()?;
        hit |= value == port;
    }
    Some(hit)
}

/// `a.b.c.d/n`, `a.b.c.d` (a host), or the IPv6 equivalents.
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

/// True when `address` lies in `net/length` (same family).
pub(crate) fn contains(net: IpAddr, length: u8, address: IpAddr) -> bool {
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

/// The `Ingress` and `Egress` of a `SecurityGroupPolicySet`, each `None` when absent.
type Directions = (Option<Vec<Policy>>, Option<Vec<Policy>>);

fn policy_set(body: &Map<String, Value>) -> Result<Directions, ApiError> {
    let set = match body.get("SecurityGroupPolicySet") {
        Some(Value::Object(set)) => set,
        None | Some(Value::Null) => {
            return Err(ApiError::new(
                "MissingParameter",
                "The request is missing a required parameter `SecurityGroupPolicySet`.",
            ));
        }
        Some(_) => return Err(invalid("SecurityGroupPolicySet", "must be an object")),
    };
    let direction = |key: &str| -> Result<Option<Vec<Policy>>, ApiError> {
        match set.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(Policy::parse)
                .collect::<Result<_, _>>()
                .map(Some),
            Some(_) => Err(invalid(key, "must be an array")),
        }
    };
    Ok((direction("Ingress")?, direction("Egress")?))
}

fn required<'a>(body: &'a Map<String, Value>, key: &str) -> Result<&'a str, ApiError> {
    match body.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        None | Some(Value::Null) | Some(Value::String(_)) => Err(ApiError::new(
            "MissingParameter",
            format!("The request is missing a required parameter `{key}`."),
        )),
        Some(_) => Err(invalid(key, "must be a String")),
    }
}

fn known(body: &Map<String, Value>, keys: &[&str]) -> Result<(), ApiError> {
    match body.keys().find(|k| !keys.contains(&k.as_str())) {
        Some(key) => Err(ApiError::new(
            "UnknownParameter",
            format!("The parameter `{key}` is not recognized."),
        )),
        None => Ok(()),
    }
}

/// `Offset` / `Limit` of `DescribeSecurityGroups`, which the API types as strings.
fn string_number(body: &Map<String, Value>, key: &str, default: usize) -> Result<usize, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::String(s)) => s
            .parse()
            .map_err(|_| invalid(key, "must be a number in a String")),
        Some(_) => Err(invalid(key, "must be a String")),
    }
}

impl State {
    /// Serves a `vpc` action, `None` when `action` is not one.
    pub(crate) fn serve_vpc(&mut self, action: &str, body: &Map<String, Value>) -> Option<Reply> {
        Some(match action {
            "CreateSecurityGroup" => self.create_security_group(body),
            "DescribeSecurityGroups" => self.describe_security_groups(body),
            "DeleteSecurityGroup" => self.delete_security_group(body),
            "DescribeSecurityGroupPolicies" => self.describe_security_group_policies(body),
            "CreateSecurityGroupPolicies" => self.change_policies(body, Change::Append),
            "DeleteSecurityGroupPolicies" => self.change_policies(body, Change::Remove),
            "ModifySecurityGroupPolicies" => self.change_policies(body, Change::ReplaceAll),
            _ => return None,
        })
    }

    fn create_security_group(&mut self, body: &Map<String, Value>) -> Reply {
        known(
            body,
            &["GroupName", "GroupDescription", "ProjectId", "Tags"],
        )?;
        let name = required(body, "GroupName")?;
        let description = required(body, "GroupDescription")?;
        if name.chars().count() > 60 {
            return Err(invalid("GroupName", "at most 60 characters"));
        }
        if description.chars().count() > 100 {
            return Err(invalid("GroupDescription", "at most 100 characters"));
        }
        let mut tags = Vec::new();
        for tag in body
            .get("Tags")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = tag.get("Key").and_then(Value::as_str).unwrap_or_default();
            if key.is_empty() {
                return Err(invalid("Tags", "every tag needs a Key"));
            }
            let value = tag.get("Value").and_then(Value::as_str).unwrap_or_default();
            tags.push((key.to_string(), value.to_string()));
        }
        if self.security_groups.len() >= self.config.quotas.security_groups {
            return Err(ApiError::new(
                "LimitExceeded",
                "The number of security groups reached the quota.",
            ));
        }
        let id = format!("sg-{:08x}", self.next_id());
        let group = SecurityGroup {
            id: id.clone(),
            name: name.to_string(),
            description: description.to_string(),
            tags,
            ingress: Vec::new(),
            egress: Vec::new(),
            version: 0,
        };
        let mut reply = Map::new();
        reply.insert("SecurityGroup".into(), group.to_json());
        self.security_groups.insert(id, group);
        Ok(reply)
    }

    fn describe_security_groups(&mut self, body: &Map<String, Value>) -> Reply {
        known(
            body,
            &[
                "SecurityGroupIds",
                "Filters",
                "Offset",
                "Limit",
                "OrderField",
                "OrderDirection",
            ],
        )?;
        let offset = string_number(body, "Offset", 0)?;
        let limit = string_number(body, "Limit", 20)?;
        if !(1..=100).contains(&limit) {
            return Err(invalid("Limit", "must be between 1 and 100"));
        }
        let ids: Option<Vec<String>> =
            body.get("SecurityGroupIds")
                .and_then(Value::as_array)
                .map(|ids| {
                    ids.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                });
        let filters = body.get("Filters").and_then(Value::as_array);
        if ids.is_some() && filters.is_some() {
            return Err(ApiError::new(
                "InvalidParameter.Coexist",
                "SecurityGroupIds and Filters cannot be given together.",
            ));
        }
        if let Some(missing) = ids
            .iter()
            .flatten()
            .find(|id| !self.security_groups.contains_key(*id))
        {
            return Err(group_not_found(missing));
        }
        let mut wanted = Vec::new();
        for filter in filters.into_iter().flatten() {
            let name = filter
                .get("Name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let values: Vec<String> = filter
                .get("Values")
                .and_then(Value::as_array)
                .map(|v| {
                    v.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            if !["security-group-id", "security-group-name", "tag-key"].contains(&name)
                && !name.starts_with("tag:")
            {
                return Err(invalid("Filters.Name", "is not a supported filter"));
            }
            wanted.push((name.to_string(), values));
        }
        let matching: Vec<&SecurityGroup> = self
            .security_groups
            .values()
            .filter(|g| ids.as_ref().is_none_or(|ids| ids.contains(&g.id)))
            .filter(|g| {
                wanted.iter().all(|(name, values)| {
                    let tag = |key: &str| g.tags.iter().find(|(k, _)| k == key).map(|(_, v)| v);
                    match name.as_str() {
                        "security-group-id" => values.contains(&g.id),
                        "security-group-name" => values.contains(&g.name),
                        "tag-key" => values.iter().any(|k| tag(k).is_some()),
                        other => {
                            let key = other.trim_start_matches("tag:");
                            tag(key).is_some_and(|v| values.contains(v))
                        }
                    }
                })
            })
            .collect();
        let mut reply = Map::new();
        reply.insert("TotalCount".into(), json!(matching.len()));
        reply.insert(
            "SecurityGroupSet".into(),
            matching
                .into_iter()
                .skip(offset)
                .take(limit)
                .map(SecurityGroup::to_json)
                .collect(),
        );
        Ok(reply)
    }

    fn delete_security_group(&mut self, body: &Map<String, Value>) -> Reply {
        known(body, &["SecurityGroupId"])?;
        let id = required(body, "SecurityGroupId")?;
        if !self.security_groups.contains_key(id) {
            return Err(group_not_found(id));
        }
        if let Some(lb) = self
            .load_balancers
            .values()
            .find(|lb| lb.security_groups.iter().any(|g| g == id))
        {
            return Err(ApiError::new(
                "ResourceInUse",
                format!(
                    "The security group `{id}` is bound to {}; unbind it first.",
                    lb.id
                ),
            ));
        }
        self.security_groups.remove(id);
        Ok(Map::new())
    }

    fn describe_security_group_policies(&mut self, body: &Map<String, Value>) -> Reply {
        known(body, &["SecurityGroupId", "Filters"])?;
        let id = required(body, "SecurityGroupId")?;
        let group = self
            .security_groups
            .get(id)
            .ok_or_else(|| group_not_found(id))?;
        let mut reply = Map::new();
        reply.insert("SecurityGroupPolicySet".into(), group.policies_json());
        Ok(reply)
    }

    fn change_policies(&mut self, body: &Map<String, Value>, change: Change) -> Reply {
        let keys: &[&str] = match change {
            Change::ReplaceAll => &["SecurityGroupId", "SecurityGroupPolicySet", "SortPolicys"],
            _ => &["SecurityGroupId", "SecurityGroupPolicySet"],
        };
        known(body, keys)?;
        let id = required(body, "SecurityGroupId")?.to_string();
        let (ingress, egress) = policy_set(body)?;
        let group = self
            .security_groups
            .get_mut(&id)
            .ok_or_else(|| group_not_found(&id))?;
        match change {
            Change::ReplaceAll => {
                group.ingress = ingress.unwrap_or_default();
                group.egress = egress.unwrap_or_default();
            }
            Change::Append | Change::Remove => {
                let (list, items) = match (ingress, egress) {
                    (Some(items), None) => (&mut group.ingress, items),
                    (None, Some(items)) => (&mut group.egress, items),
                    _ => {
                        return Err(invalid(
                            "SecurityGroupPolicySet",
                            "one request changes one direction (Ingress or Egress)",
                        ));
                    }
                };
                if matches!(change, Change::Append) {
                    list.extend(items);
                } else {
                    for item in items {
                        let at = list.iter().position(|p| *p == item).ok_or_else(|| {
                            ApiError::new(
                                "ResourceNotFound",
                                "The security group policy to delete does not exist.",
                            )
                        })?;
                        list.remove(at);
                    }
                }
            }
        }
        group.version += 1;
        Ok(Map::new())
    }

    /// `SetLoadBalancerSecurityGroups`: the CLB's bound groups become exactly the ones given
    /// (none unbinds all).
    pub(crate) fn set_load_balancer_security_groups(&mut self, body: &Map<String, Value>) -> Reply {
        known(body, &["LoadBalancerId", "SecurityGroups"])?;
        let lb_id = required(body, "LoadBalancerId")?.to_string();
        let groups: Vec<String> = match body.get("SecurityGroups") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|g| {
                    g.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| invalid("SecurityGroups", "must be strings"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(invalid("SecurityGroups", "must be an array")),
        };
        if groups.len() > MAX_BOUND {
            return Err(ApiError::new(
                "LimitExceeded",
                format!("At most {MAX_BOUND} security groups can be bound to a CLB."),
            ));
        }
        if let Some(missing) = groups
            .iter()
            .find(|g| !self.security_groups.contains_key(*g))
        {
            return Err(ApiError::new(
                "InvalidParameter",
                format!("The security group `{missing}` does not exist."),
            ));
        }
        self.writable_load_balancer(&lb_id)?;
        if let Some(lb) = self.load_balancers.get_mut(&lb_id) {
            let mut seen = std::collections::BTreeSet::new();
            lb.security_groups = groups
                .into_iter()
                .filter(|g| seen.insert(g.clone()))
                .collect();
        }
        Ok(Map::new())
    }

    /// Would a packet from `source` reach listener `protocol`/`port` of CLB `lb_id`? The CLB
    /// and the listener must exist; then, with no group bound, yes; with groups bound, the
    /// first matching ingress policy in bound-group order decides, and no match is a drop.
    pub fn would_reach(&self, lb_id: &str, source: IpAddr, protocol: &str, port: u16) -> bool {
        let Some(lb) = self.load_balancers.get(lb_id) else {
            return false;
        };
        if !lb
            .listeners
            .values()
            .any(|l| l.protocol == protocol && l.port == port)
        {
            return false;
        }
        if lb.security_groups.is_empty() {
            return true;
        }
        lb.security_groups
            .iter()
            .filter_map(|id| self.security_groups.get(id))
            .flat_map(|g| g.ingress.iter())
            .find(|p| p.matches(source, protocol, port))
            .is_some_and(|p| p.action == "ACCEPT")
    }
}

/// What a policy write does.
#[derive(Debug, Clone, Copy)]
enum Change {
    /// `CreateSecurityGroupPolicies`: appends to one direction.
    Append,
    /// `DeleteSecurityGroupPolicies`: removes matching policies of one direction.
    Remove,
    /// `ModifySecurityGroupPolicies`: both directions become the given ones.
    ReplaceAll,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_specifications_and_cidrs_match_as_the_cloud_reads_them() {
        assert_eq!(port_matches("ALL", 5), Some(true));
        assert_eq!(port_matches("80,443", 443), Some(true));
        assert_eq!(port_matches("80,443", 8080), Some(false));
        assert_eq!(port_matches("1000-2000", 1500), Some(true));
        assert_eq!(port_matches("x", 1), None);
        let (net, len) = parse_cidr("143.231.0.0/16").unwrap();
        assert!(contains(net, len, "143.231.9.1".parse().unwrap()));
        assert!(!contains(net, len, "143.232.0.1".parse().unwrap()));
        assert!(!contains(net, len, "::1".parse().unwrap()));
    }
}

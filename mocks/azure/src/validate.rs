//! Body validation following the public Microsoft.Network REST reference (2024-03-01): required
//! fields, enum values, name patterns and numeric ranges. Only rules that need no other resource
//! live here; cross-resource checks (references, quotas, conflicts) are in `integrity`.

use std::collections::BTreeSet;
use std::net::IpAddr;

use serde_json::Value;

use crate::error::ArmError;

type Result<T = ()> = std::result::Result<T, ArmError>;

/// Resource and child names: 1–80 characters of letters, digits, `_`, `.` and `-`, starting with
/// a letter or digit and ending with a letter, digit or `_`.
pub fn name(kind: &str, name: &str) -> Result {
    let valid_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    let first_ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric());
    let last_ok = name
        .chars()
        .last()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    if name.is_empty() || name.len() > 80 || !valid_chars || !first_ok || !last_ok {
        return Err(ArmError::bad_request(
            "InvalidResourceName",
            format!(
                "Resource name {name} of type {kind} is invalid. It must be 1-80 characters of letters, digits, underscores, periods and hyphens, begin with a letter or digit and end with a letter, digit or underscore."
            ),
        ));
    }
    Ok(())
}

/// A string field, when present.
pub fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(value, path).and_then(Value::as_str)
}

/// A field by path, when present and not null.
pub fn at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = value;
    for key in path {
        cur = cur.get(*key)?;
    }
    if cur.is_null() { None } else { Some(cur) }
}

/// The array at `path`, or an empty slice.
pub fn array_at<'a>(value: &'a Value, path: &[&str]) -> &'a [Value] {
    at(value, path)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn enum_value(field: &str, value: Option<&str>, allowed: &[&str], required: bool) -> Result {
    match value {
        None if required => Err(ArmError::bad_request(
            "InvalidRequestFormat",
            format!("Cannot parse the request: required property '{field}' is missing."),
        )),
        None => Ok(()),
        Some(v) if allowed.contains(&v) => Ok(()),
        Some(v) => Err(ArmError::bad_request(
            "InvalidRequestFormat",
            format!(
                "Cannot parse the request: value '{v}' of '{field}' is not one of {}.",
                allowed.join(", ")
            ),
        )),
    }
}

fn int_in(field: &str, value: Option<&Value>, min: i64, max: i64, required: bool) -> Result {
    match value {
        None if required => Err(ArmError::bad_request(
            "InvalidRequestFormat",
            format!("Cannot parse the request: required property '{field}' is missing."),
        )),
        None => Ok(()),
        Some(v) => match v.as_i64() {
            Some(n) if (min..=max).contains(&n) => Ok(()),
            _ => Err(ArmError::bad_request(
                "InvalidRequestFormat",
                format!("Value {v} of '{field}' is out of range [{min}, {max}]."),
            )),
        },
    }
}

fn ip(field: &str, value: Option<&str>) -> Result {
    match value {
        Some(v) if v.parse::<IpAddr>().is_err() => Err(ArmError::bad_request(
            "InvalidRequestFormat",
            format!("'{v}' in '{field}' is not a valid IP address."),
        )),
        _ => Ok(()),
    }
}

/// Checks the envelope every top-level resource shares: location, tag limits.
pub fn envelope(body: &Value, known_locations: &[String]) -> Result {
    if !body.is_object() {
        return Err(ArmError::bad_request(
            "InvalidRequestFormat",
            "Cannot parse the request: the body must be a JSON object.",
        ));
    }
    let Some(location) = str_at(body, &["location"]) else {
        return Err(ArmError::bad_request(
            "LocationRequired",
            "The location property is required for this definition.",
        ));
    };
    let normalized = location.to_ascii_lowercase().replace(' ', "");
    if !known_locations
        .iter()
        .any(|l| l.eq_ignore_ascii_case(&normalized))
    {
        return Err(ArmError::bad_request(
            "LocationNotAvailableForResourceType",
            format!("The provided location '{location}' is not available for this resource type."),
        ));
    }
    if let Some(tags) = at(body, &["tags"]) {
        let Some(tags) = tags.as_object() else {
            return Err(ArmError::bad_request(
                "InvalidTag",
                "tags must be an object",
            ));
        };
        if tags.len() > 50 {
            return Err(ArmError::bad_request(
                "InvalidTag",
                "A resource can have at most 50 tags.",
            ));
        }
        for (k, v) in tags {
            if k.len() > 512 || !v.is_string() || v.as_str().is_some_and(|v| v.len() > 256) {
                return Err(ArmError::bad_request(
                    "InvalidTagNameCharacters",
                    format!(
                        "Tag '{k}' is invalid: names up to 512 and string values up to 256 characters."
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The SKU name of a load balancer or public IP (`Basic` when absent, as ARM defaults it).
pub fn sku(body: &Value) -> &str {
    str_at(body, &["sku", "name"]).unwrap_or("Basic")
}

/// `PUT loadBalancers/{name}` rules that need no other resource.
pub fn load_balancer(body: &Value) -> Result {
    enum_value(
        "sku.name",
        str_at(body, &["sku", "name"]),
        &["Basic", "Standard", "Gateway"],
        false,
    )?;
    enum_value(
        "sku.tier",
        str_at(body, &["sku", "tier"]),
        &["Regional", "Global"],
        false,
    )?;
    let standard = sku(body) == "Standard";
    let mut names = BTreeSet::new();
    let mut public = 0;
    let mut private = 0;
    for fe in array_at(body, &["properties", "frontendIPConfigurations"]) {
        let fe_name = child_name("frontendIPConfigurations", fe, &mut names)?;
        let has_pip = at(fe, &["properties", "publicIPAddress", "id"]).is_some();
        let has_prefix = at(fe, &["properties", "publicIPPrefix", "id"]).is_some();
        let has_subnet = at(fe, &["properties", "subnet", "id"]).is_some();
        match (has_pip || has_prefix, has_subnet) {
            (true, true) | (false, false) => {
                return Err(ArmError::bad_request(
                    "InvalidFrontendIPConfiguration",
                    format!(
                        "Frontend IP configuration {fe_name} must reference either a public IP address or a subnet."
                    ),
                ));
            }
            (true, false) => public += 1,
            (false, true) => private += 1,
        }
        let method = str_at(fe, &["properties", "privateIPAllocationMethod"]);
        enum_value(
            "privateIPAllocationMethod",
            method,
            &["Static", "Dynamic"],
            false,
        )?;
        enum_value(
            "privateIPAddressVersion",
            str_at(fe, &["properties", "privateIPAddressVersion"]),
            &["IPv4", "IPv6"],
            false,
        )?;
        let address = str_at(fe, &["properties", "privateIPAddress"]);
        ip("privateIPAddress", address)?;
        if method == Some("Static") && address.is_none() && has_subnet {
            return Err(ArmError::bad_request(
                "PrivateIPAddressRequired",
                format!("Frontend {fe_name} uses Static allocation but has no privateIPAddress."),
            ));
        }
    }
    if public > 0 && private > 0 {
        return Err(ArmError::bad_request(
            "LoadBalancerCannotHavePublicAndPrivateFrontendIPConfigurations",
            "A load balancer cannot have both public and private frontend IP configurations.",
        ));
    }
    names.clear();
    for pool in array_at(body, &["properties", "backendAddressPools"]) {
        child_name("backendAddressPools", pool, &mut names)?;
        backend_addresses(pool)?;
    }
    names.clear();
    for probe in array_at(body, &["properties", "probes"]) {
        let probe_name = child_name("probes", probe, &mut names)?;
        let protocol = str_at(probe, &["properties", "protocol"]);
        enum_value("probes.protocol", protocol, &["Http", "Tcp", "Https"], true)?;
        int_in(
            "probes.port",
            at(probe, &["properties", "port"]),
            1,
            65535,
            true,
        )?;
        int_in(
            "probes.intervalInSeconds",
            at(probe, &["properties", "intervalInSeconds"]),
            5,
            2_147_483_647,
            false,
        )?;
        int_in(
            "probes.numberOfProbes",
            at(probe, &["properties", "numberOfProbes"]),
            1,
            2_147_483_647,
            false,
        )?;
        int_in(
            "probes.probeThreshold",
            at(probe, &["properties", "probeThreshold"]),
            1,
            2_147_483_647,
            false,
        )?;
        let path = str_at(probe, &["properties", "requestPath"]);
        match (protocol, path) {
            (Some("Http" | "Https"), None) => {
                return Err(ArmError::bad_request(
                    "ProbeRequestPathRequired",
                    format!(
                        "Probe {probe_name} uses protocol {} and needs a requestPath.",
                        protocol.unwrap_or_default()
                    ),
                ));
            }
            (Some("Tcp"), Some(_)) => {
                return Err(ArmError::bad_request(
                    "ProbeRequestPathNotAllowed",
                    format!("Probe {probe_name} uses protocol Tcp and must not set requestPath."),
                ));
            }
            (Some("Https"), _) if !standard => {
                return Err(ArmError::bad_request(
                    "HttpsProbeRequiresStandardSku",
                    format!("Probe {probe_name}: Https probes need a Standard SKU load balancer."),
                ));
            }
            (_, Some(p)) if !p.starts_with('/') => {
                return Err(ArmError::bad_request(
                    "InvalidProbeRequestPath",
                    format!("Probe {probe_name}: requestPath must start with '/'."),
                ));
            }
            _ => {}
        }
    }
    names.clear();
    let max_idle = if standard { 100 } else { 30 };
    for rule in array_at(body, &["properties", "loadBalancingRules"]) {
        let rule_name = child_name("loadBalancingRules", rule, &mut names)?;
        let protocol = str_at(rule, &["properties", "protocol"]);
        enum_value(
            "loadBalancingRules.protocol",
            protocol,
            &["Tcp", "Udp", "All"],
            true,
        )?;
        let all = protocol == Some("All");
        int_in(
            "frontendPort",
            at(rule, &["properties", "frontendPort"]),
            0,
            65534,
            true,
        )?;
        int_in(
            "backendPort",
            at(rule, &["properties", "backendPort"]),
            0,
            65535,
            false,
        )?;
        let zero_port =
            |field: &str| at(rule, &["properties", field]).and_then(Value::as_i64) == Some(0);
        if !all && (zero_port("frontendPort") || zero_port("backendPort")) {
            return Err(ArmError::bad_request(
                "InvalidLoadBalancingRulePort",
                format!("Rule {rule_name}: port 0 is only allowed with protocol All (HA ports)."),
            ));
        }
        if all && !standard {
            return Err(ArmError::bad_request(
                "HaPortsRequiresStandardSku",
                format!("Rule {rule_name}: protocol All needs a Standard SKU load balancer."),
            ));
        }
        int_in(
            "idleTimeoutInMinutes",
            at(rule, &["properties", "idleTimeoutInMinutes"]),
            4,
            max_idle,
            false,
        )?;
        enum_value(
            "loadDistribution",
            str_at(rule, &["properties", "loadDistribution"]),
            &["Default", "SourceIP", "SourceIPProtocol"],
            false,
        )?;
        if at(rule, &["properties", "frontendIPConfiguration", "id"]).is_none() {
            return Err(ArmError::bad_request(
                "InvalidRequestFormat",
                format!(
                    "Rule {rule_name}: required property 'frontendIPConfiguration' is missing."
                ),
            ));
        }
    }
    Ok(())
}

fn child_name<'a>(kind: &str, child: &'a Value, seen: &mut BTreeSet<String>) -> Result<&'a str> {
    let Some(child_name) = str_at(child, &["name"]) else {
        return Err(ArmError::bad_request(
            "InvalidRequestFormat",
            format!("Every entry of {kind} needs a name."),
        ));
    };
    name(kind, child_name)?;
    if !seen.insert(child_name.to_ascii_lowercase()) {
        return Err(ArmError::bad_request(
            "DuplicateResourceName",
            format!("More than one entry of {kind} is named {child_name}."),
        ));
    }
    Ok(child_name)
}

/// A backend pool body (inside a load balancer or on its own).
pub fn backend_addresses(pool: &Value) -> Result {
    let mut names = BTreeSet::new();
    for address in array_at(pool, &["properties", "loadBalancerBackendAddresses"]) {
        child_name("loadBalancerBackendAddresses", address, &mut names)?;
        let Some(ip_address) = str_at(address, &["properties", "ipAddress"]) else {
            return Err(ArmError::bad_request(
                "InvalidRequestFormat",
                "loadBalancerBackendAddresses entries need properties.ipAddress.",
            ));
        };
        ip("ipAddress", Some(ip_address))?;
    }
    Ok(())
}

/// `PUT publicIPAddresses/{name}` rules that need no other resource.
pub fn public_ip(body: &Value) -> Result {
    enum_value(
        "sku.name",
        str_at(body, &["sku", "name"]),
        &["Basic", "Standard"],
        false,
    )?;
    enum_value(
        "sku.tier",
        str_at(body, &["sku", "tier"]),
        &["Regional", "Global"],
        false,
    )?;
    let method = str_at(body, &["properties", "publicIPAllocationMethod"]);
    enum_value(
        "publicIPAllocationMethod",
        method,
        &["Static", "Dynamic"],
        false,
    )?;
    if sku(body) == "Standard" && method != Some("Static") {
        return Err(ArmError::bad_request(
            "StandardSkuPublicIPAddressesMustBeStatic",
            "Standard SKU public IP addresses must use publicIPAllocationMethod Static.",
        ));
    }
    enum_value(
        "publicIPAddressVersion",
        str_at(body, &["properties", "publicIPAddressVersion"]),
        &["IPv4", "IPv6"],
        false,
    )?;
    int_in(
        "idleTimeoutInMinutes",
        at(body, &["properties", "idleTimeoutInMinutes"]),
        4,
        30,
        false,
    )?;
    if let Some(label) = str_at(body, &["properties", "dnsSettings", "domainNameLabel"]) {
        let ok = (3..=63).contains(&label.len())
            && label.starts_with(|c: char| c.is_ascii_lowercase())
            && label.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            return Err(ArmError::bad_request(
                "InvalidDomainNameLabel",
                format!(
                    "The domain name label {label} is invalid. It must conform to the regular expression ^[a-z][a-z0-9-]{{1,61}}[a-z0-9]$."
                ),
            ));
        }
    }
    Ok(())
}

fn port_range(field: &str, value: &str) -> Result {
    let valid = |p: &str| p.parse::<u16>().is_ok();
    let ok = value == "*"
        || valid(value)
        || value.split_once('-').is_some_and(|(a, b)| {
            valid(a) && valid(b) && a.parse::<u16>().ok() <= b.parse::<u16>().ok()
        });
    if ok {
        Ok(())
    } else {
        Err(ArmError::bad_request(
            "SecurityRuleInvalidPortRange",
            format!(
                "Security rule has invalid Port range '{value}' in {field}. Value must be *, an integer or a range n-m between 0 and 65535."
            ),
        ))
    }
}

/// The single value and the list of one of a security rule's `single`/`many` property pairs
/// (`sourcePortRange`/`sourcePortRanges`, …): ARM takes exactly one of the two.
fn one_of_pair<'a>(
    rule: &'a Value,
    rule_name: &str,
    single: &str,
    many: &str,
) -> Result<(Option<&'a str>, &'a [Value])> {
    let one = str_at(rule, &["properties", single]);
    let list = array_at(rule, &["properties", many]);
    if one.is_some() != list.is_empty() {
        return Err(ArmError::bad_request(
            "SecurityRuleParameterContainsUnsupportedValue",
            format!("Security rule {rule_name} must set exactly one of {single} and {many}."),
        ));
    }
    Ok((one, list))
}

/// One security rule (inside an NSG or on its own).
pub fn security_rule(rule: &Value) -> Result {
    let rule_name = str_at(rule, &["name"]).unwrap_or_default();
    let props = |k: &str| str_at(rule, &["properties", k]);
    enum_value(
        "protocol",
        props("protocol"),
        &["Tcp", "Udp", "Icmp", "Esp", "Ah", "*"],
        true,
    )?;
    enum_value("access", props("access"), &["Allow", "Deny"], true)?;
    enum_value(
        "direction",
        props("direction"),
        &["Inbound", "Outbound"],
        true,
    )?;
    int_in(
        "priority",
        at(rule, &["properties", "priority"]),
        100,
        4096,
        true,
    )?;
    for (single, many) in [
        ("sourcePortRange", "sourcePortRanges"),
        ("destinationPortRange", "destinationPortRanges"),
    ] {
        let (one, list) = one_of_pair(rule, rule_name, single, many)?;
        if let Some(one) = one {
            port_range(single, one)?;
        }
        for p in list {
            port_range(many, p.as_str().unwrap_or("?"))?;
        }
    }
    for (single, many) in [
        ("sourceAddressPrefix", "sourceAddressPrefixes"),
        ("destinationAddressPrefix", "destinationAddressPrefixes"),
    ] {
        let (one, list) = one_of_pair(rule, rule_name, single, many)?;
        for prefix in one.into_iter().chain(list.iter().filter_map(Value::as_str)) {
            address_prefix(rule_name, prefix)?;
        }
    }
    Ok(())
}

fn address_prefix(rule: &str, prefix: &str) -> Result {
    let is_tag = prefix == "*"
        || (prefix
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_uppercase())
            && prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.'));
    if is_tag || prefix.parse::<IpAddr>().is_ok() || prefix.parse::<ipnet::IpNet>().is_ok() {
        Ok(())
    } else {
        Err(ArmError::bad_request(
            "SecurityRuleInvalidAddressPrefix",
            format!("Security rule {rule} has invalid Address prefix. Value provided: {prefix}"),
        ))
    }
}

/// `PUT networkSecurityGroups/{name}` rules that need no other resource: each rule, unique
/// names, unique priority per direction, and the per-group limits.
pub fn security_group(body: &Value) -> Result {
    let rules = array_at(body, &["properties", "securityRules"]);
    security_rules(rules)
}

/// The rule list of a security group.
pub fn security_rules(rules: &[Value]) -> Result {
    if rules.len() > 1000 {
        return Err(ArmError::bad_request(
            "SecurityRulesPerNetworkSecurityGroupLimitReached",
            "A network security group can have at most 1000 rules.",
        ));
    }
    let mut names = BTreeSet::new();
    let mut priorities = BTreeSet::new();
    let (mut sources, mut destinations) = (0usize, 0usize);
    for rule in rules {
        let rule_name = child_name("securityRules", rule, &mut names)?;
        security_rule(rule)?;
        let direction = str_at(rule, &["properties", "direction"]).unwrap_or_default();
        let priority = at(rule, &["properties", "priority"])
            .and_then(Value::as_i64)
            .unwrap_or_default();
        if !priorities.insert((direction.to_string(), priority)) {
            return Err(ArmError::bad_request(
                "SecurityRuleConflict",
                format!(
                    "Security rule {rule_name} has the same priority {priority} and direction {direction} as another rule."
                ),
            ));
        }
        sources += array_at(rule, &["properties", "sourceAddressPrefixes"])
            .len()
            .max(1);
        destinations += array_at(rule, &["properties", "destinationAddressPrefixes"])
            .len()
            .max(1);
    }
    if sources > 4000 || destinations > 4000 {
        return Err(ArmError::bad_request(
            "SecurityRuleAddressesOrPortsPerSecurityGroupLimitReached",
            format!(
                "Security group has {sources} source and {destinations} destination prefixes; the limit is 4000 each."
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_follow_the_arm_pattern() {
        for (n, ok) in [
            ("kubernetes", true),
            ("a1b2-TCP-80", true),
            ("x_", true),
            ("-x", false),
            ("x-", false),
            ("", false),
            ("a b", false),
            (&"a".repeat(81), false),
        ] {
            assert_eq!(name("t", n).is_ok(), ok, "{n}");
        }
    }

    fn lb(rule: Value, probe: Value) -> Value {
        json!({"location": "eastus", "sku": {"name": "Standard"}, "properties": {
            "frontendIPConfigurations": [{"name": "fe", "properties": {"publicIPAddress": {"id": "/x"}}}],
            "backendAddressPools": [{"name": "pool"}],
            "probes": [probe],
            "loadBalancingRules": [rule]}})
    }

    #[test]
    fn load_balancer_enums_and_ranges() {
        let probe_ok = json!({"name": "p", "properties": {"protocol": "Tcp", "port": 30000, "intervalInSeconds": 5}});
        let rule = |protocol: &str, port: i64, idle: i64| {
            json!({"name": "r", "properties": {"protocol": protocol, "frontendPort": port, "backendPort": port,
                "idleTimeoutInMinutes": idle, "frontendIPConfiguration": {"id": "/fe"}}})
        };
        let cases = [
            (rule("Tcp", 80, 4), probe_ok.clone(), None),
            (
                rule("TCP", 80, 4),
                probe_ok.clone(),
                Some("InvalidRequestFormat"),
            ),
            (
                rule("Tcp", 0, 4),
                probe_ok.clone(),
                Some("InvalidLoadBalancingRulePort"),
            ),
            (rule("All", 0, 4), probe_ok.clone(), None),
            (
                rule("Tcp", 80, 101),
                probe_ok.clone(),
                Some("InvalidRequestFormat"),
            ),
            (
                rule("Tcp", 80, 3),
                probe_ok.clone(),
                Some("InvalidRequestFormat"),
            ),
            (
                rule("Udp", 53, 4),
                json!({"name": "p", "properties": {"protocol": "Http", "port": 1}}),
                Some("ProbeRequestPathRequired"),
            ),
            (
                rule("Udp", 53, 4),
                json!({"name": "p", "properties": {"protocol": "Tcp", "port": 1, "requestPath": "/"}}),
                Some("ProbeRequestPathNotAllowed"),
            ),
            (
                rule("Udp", 53, 4),
                json!({"name": "p", "properties": {"protocol": "Tcp", "port": 1, "intervalInSeconds": 4}}),
                Some("InvalidRequestFormat"),
            ),
        ];
        for (rule, probe, want) in cases {
            let got = load_balancer(&lb(rule.clone(), probe.clone()))
                .err()
                .map(|e| e.code);
            assert_eq!(got.as_deref(), want, "rule {rule} probe {probe}");
        }
    }

    #[test]
    fn public_and_private_frontends_do_not_mix() {
        let body = json!({"location": "eastus", "properties": {"frontendIPConfigurations": [
            {"name": "a", "properties": {"publicIPAddress": {"id": "/p"}}},
            {"name": "b", "properties": {"subnet": {"id": "/s"}}}]}});
        assert_eq!(
            load_balancer(&body).unwrap_err().code,
            "LoadBalancerCannotHavePublicAndPrivateFrontendIPConfigurations"
        );
    }

    #[test]
    fn security_rules_checked() {
        let rule = |name: &str, prio: i64, port: &str| {
            json!({"name": name, "properties": {"protocol": "Tcp", "access": "Allow", "direction": "Inbound",
                "priority": prio, "sourcePortRange": "*", "destinationPortRanges": [port],
                "sourceAddressPrefix": "Internet", "destinationAddressPrefixes": ["20.0.0.1"]}})
        };
        assert!(security_rules(&[rule("a", 500, "80"), rule("b", 501, "80-90")]).is_ok());
        assert_eq!(
            security_rules(&[rule("a", 500, "80"), rule("b", 500, "81")])
                .unwrap_err()
                .code,
            "SecurityRuleConflict"
        );
        assert_eq!(
            security_rules(&[rule("a", 99, "80")]).unwrap_err().code,
            "InvalidRequestFormat"
        );
        assert_eq!(
            security_rules(&[rule("a", 500, "90-80")]).unwrap_err().code,
            "SecurityRuleInvalidPortRange"
        );
    }

    #[test]
    fn standard_public_ip_must_be_static() {
        let pip = |method: &str| json!({"location": "eastus", "sku": {"name": "Standard"}, "properties": {"publicIPAllocationMethod": method}});
        assert!(public_ip(&pip("Static")).is_ok());
        assert_eq!(
            public_ip(&pip("Dynamic")).unwrap_err().code,
            "StandardSkuPublicIPAddressesMustBeStatic"
        );
    }
}

//! Cross-resource rules: references inside and between resources, in-use checks, quotas, and
//! the server-computed back-references (`loadBalancingRules` on children, `ipConfiguration` on
//! public IPs).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::{Value, json};

use crate::error::ArmError;
use crate::state::{Kind, State, Stored};
use crate::validate::{array_at, at, sku, str_at};

fn invalid_reference(referenced: &str, by: &str) -> ArmError {
    ArmError::bad_request(
        "InvalidResourceReference",
        format!(
            "Resource {referenced} referenced by resource {by} was not found. Please make sure that the referenced resource exists, and that both resources are in the same region."
        ),
    )
}

fn lower(s: &str) -> String {
    s.to_ascii_lowercase()
}

/// Checks a load-balancer body and fills in server-computed fields (allocated private IPs,
/// back-references).
pub fn load_balancer(
    state: &mut State,
    id: &str,
    body: &mut Value,
    existing: Option<&Stored>,
) -> Result<(), ArmError> {
    let lb_sku = sku(body).to_string();
    let frontends = array_at(body, &["properties", "frontendIPConfigurations"]).to_vec();
    let rules = array_at(body, &["properties", "loadBalancingRules"]).to_vec();
    let quotas = state.config.quotas.clone();
    if frontends.len() > quotas.frontends_per_lb {
        return Err(ArmError::bad_request(
            "LoadBalancerFrontendIPConfigurationCountLimitReached",
            format!(
                "Load balancer {id} has {} frontend IP configurations; the limit is {}.",
                frontends.len(),
                quotas.frontends_per_lb
            ),
        ));
    }
    if rules.len() > quotas.rules_per_lb {
        return Err(ArmError::bad_request(
            "LoadBalancingRuleCountLimitReached",
            format!(
                "Load balancer {id} has {} rules; the limit is {}.",
                rules.len(),
                quotas.rules_per_lb
            ),
        ));
    }
    let child_ids = |collection: &str| -> BTreeSet<String> {
        array_at(body, &["properties", collection])
            .iter()
            .filter_map(|c| str_at(c, &["name"]))
            .map(|n| lower(&format!("{id}/{collection}/{n}")))
            .collect()
    };
    let frontend_ids = child_ids("frontendIPConfigurations");
    let pool_ids = child_ids("backendAddressPools");
    let probe_ids = child_ids("probes");
    let mut listeners: BTreeMap<(String, i64), String> = BTreeMap::new();
    for rule in &rules {
        let rule_name = str_at(rule, &["name"]).unwrap_or_default();
        let rule_id = format!("{id}/loadBalancingRules/{rule_name}");
        for (field, ids) in [
            ("frontendIPConfiguration", &frontend_ids),
            ("backendAddressPool", &pool_ids),
            ("probe", &probe_ids),
        ] {
            if let Some(reference) = str_at(rule, &["properties", field, "id"])
                && !ids.contains(&lower(reference))
            {
                return Err(invalid_reference(reference, &rule_id));
            }
        }
        let frontend = lower(
            str_at(rule, &["properties", "frontendIPConfiguration", "id"]).unwrap_or_default(),
        );
        let protocol = str_at(rule, &["properties", "protocol"]).unwrap_or_default();
        let port = at(rule, &["properties", "frontendPort"])
            .and_then(Value::as_i64)
            .unwrap_or_default();
        let keys: Vec<(String, i64)> = if protocol == "All" {
            vec![
                (format!("{frontend}|Tcp"), port),
                (format!("{frontend}|Udp"), port),
            ]
        } else {
            vec![(format!("{frontend}|{protocol}"), port)]
        };
        for key in keys {
            let all_key = (format!("{frontend}|All"), 0);
            let clash = listeners.get(&key).or_else(|| {
                (protocol != "All")
                    .then(|| listeners.get(&all_key))
                    .flatten()
            });
            if let Some(other) = clash {
                return Err(ArmError::bad_request(
                    "LoadBalancingRuleFrontendPortConflict",
                    format!(
                        "Load balancing rules {other} and {rule_name} use the same frontend IP configuration, protocol and frontend port."
                    ),
                ));
            }
            listeners.insert(key, rule_name.to_string());
        }
        if protocol == "All" {
            listeners.insert((format!("{frontend}|All"), 0), rule_name.to_string());
        }
    }
    // Frontends: public IP and subnet references, private IP allocation.
    let old_frontends: BTreeMap<String, Value> = existing
        .map(|e| array_at(&e.body, &["properties", "frontendIPConfigurations"]))
        .unwrap_or_default()
        .iter()
        .filter_map(|f| Some((lower(str_at(f, &["name"])?), f.clone())))
        .collect();
    let mut used_pips = BTreeSet::new();
    // Addresses held by NICs and other load balancers (with who holds each), plus those this
    // body's frontends take in order.
    let mut taken = private_ips_in_use(state, id);
    // Dynamic allocation must not hand out an address a later frontend asks for statically.
    let requested_static: BTreeSet<IpAddr> = frontends
        .iter()
        .filter(|f| str_at(f, &["properties", "privateIPAllocationMethod"]) == Some("Static"))
        .filter_map(|f| str_at(f, &["properties", "privateIPAddress"])?.parse().ok())
        .collect();
    let mut new_frontends = Vec::with_capacity(frontends.len());
    for mut fe in frontends {
        let fe_name = str_at(&fe, &["name"]).unwrap_or_default().to_string();
        let fe_id = format!("{id}/frontendIPConfigurations/{fe_name}");
        if let Some(pip_id) =
            str_at(&fe, &["properties", "publicIPAddress", "id"]).map(str::to_string)
        {
            let Some(pip) = state.by_id(&pip_id).filter(|r| r.kind == Kind::PublicIp) else {
                return Err(invalid_reference(&pip_id, &fe_id));
            };
            if str_at(&pip.body, &["properties", "provisioningState"]) != Some("Succeeded") {
                return Err(ArmError::bad_request(
                    "ReferencedResourceNotProvisioned",
                    format!(
                        "Cannot proceed with operation because resource {pip_id} used by resource {fe_id} is not in Succeeded state."
                    ),
                ));
            }
            if sku(&pip.body) != lb_sku {
                return Err(ArmError::bad_request(
                    "PublicIPAndLBSkuDoNotMatch",
                    format!(
                        "Standard sku load balancer and public IP resources must match: {pip_id} is {} and the load balancer {lb_sku}.",
                        sku(&pip.body)
                    ),
                ));
            }
            let holder = str_at(&pip.body, &["properties", "ipConfiguration", "id"]).map(lower);
            let attached_elsewhere = holder
                .as_deref()
                .is_some_and(|h| !h.starts_with(&format!("{}/", lower(id))));
            if attached_elsewhere || !used_pips.insert(lower(&pip_id)) {
                return Err(ArmError::bad_request(
                    "PublicIPAddressInUse",
                    format!(
                        "Public IP address {pip_id} is already in use by {}.",
                        holder.unwrap_or(fe_id.clone())
                    ),
                ));
            }
        }
        if let Some(subnet_id) = str_at(&fe, &["properties", "subnet", "id"]).map(str::to_string) {
            let Some(prefix) = subnet_prefix(state, &subnet_id) else {
                return Err(invalid_reference(&subnet_id, &fe_id));
            };
            let requested = str_at(&fe, &["properties", "privateIPAddress"])
                .and_then(|a| a.parse::<IpAddr>().ok());
            let method = str_at(&fe, &["properties", "privateIPAllocationMethod"])
                .unwrap_or("Dynamic")
                .to_string();
            let method = method.as_str();
            let address = if method == "Static" {
                let Some(address) = requested else {
                    return Err(ArmError::bad_request(
                        "PrivateIPAddressRequired",
                        format!("{fe_id} needs privateIPAddress"),
                    ));
                };
                if !prefix.contains(&address) {
                    return Err(ArmError::bad_request(
                        "PrivateIPAddressNotInSubnet",
                        format!(
                            "IP address {address} does not belong to subnet {subnet_id} ({prefix})."
                        ),
                    ));
                }
                if is_reserved(prefix, address) {
                    return Err(ArmError::bad_request(
                        "PrivateIPAddressInReservedRange",
                        format!(
                            "Private static IP address {address} falls within reserved IP range of subnet prefix {prefix}."
                        ),
                    ));
                }
                if let Some(holder) = taken.get(&address) {
                    return Err(ArmError::bad_request(
                        "PrivateIPAddressIsAllocated",
                        format!(
                            "IP configuration {fe_id} is using the private IP address {address} which is already allocated to resource {holder}."
                        ),
                    ));
                }
                address
            } else {
                // Dynamic keeps the address it had, if the frontend stays in the same subnet.
                let previous = old_frontends.get(&lower(&fe_name)).and_then(|old| {
                    let same_subnet = str_at(old, &["properties", "subnet", "id"]).map(lower)
                        == Some(lower(&subnet_id));
                    same_subnet
                        .then(|| {
                            str_at(old, &["properties", "privateIPAddress"])?
                                .parse::<IpAddr>()
                                .ok()
                        })
                        .flatten()
                });
                let held = |a: &IpAddr| taken.contains_key(a) || requested_static.contains(a);
                match previous.or_else(|| first_free(prefix, held)) {
                    Some(a) => a,
                    None => {
                        return Err(ArmError::bad_request(
                            "SubnetIsFull",
                            format!("Subnet {subnet_id} has no free address."),
                        ));
                    }
                }
            };
            taken.insert(address, fe_id.clone());
            if let Some(props) = fe.get_mut("properties").and_then(Value::as_object_mut) {
                props.insert("privateIPAddress".into(), json!(address.to_string()));
                props.insert("privateIPAllocationMethod".into(), json!(method));
                props
                    .entry("privateIPAddressVersion")
                    .or_insert(json!("IPv4"));
            }
        }
        new_frontends.push(fe);
    }
    for pool in array_at(body, &["properties", "backendAddressPools"]) {
        for address in array_at(pool, &["properties", "loadBalancerBackendAddresses"]) {
            if let Some(vnet) = str_at(address, &["properties", "virtualNetwork", "id"])
                && state
                    .by_id(vnet)
                    .is_none_or(|r| r.kind != Kind::VirtualNetwork)
            {
                return Err(invalid_reference(
                    vnet,
                    &format!("{id}/backendAddressPools"),
                ));
            }
        }
    }
    if let Some(props) = body.get_mut("properties").and_then(Value::as_object_mut) {
        props.insert(
            "frontendIPConfigurations".into(),
            Value::Array(new_frontends),
        );
    }
    set_back_references(id, body);
    Ok(())
}

/// Every child a rule points at lists that rule in its `loadBalancingRules`.
fn set_back_references(id: &str, body: &mut Value) {
    let mut refs: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for rule in array_at(body, &["properties", "loadBalancingRules"]) {
        let rule_id = format!(
            "{id}/loadBalancingRules/{}",
            str_at(rule, &["name"]).unwrap_or_default()
        );
        for field in ["frontendIPConfiguration", "backendAddressPool", "probe"] {
            if let Some(target) = str_at(rule, &["properties", field, "id"]) {
                refs.entry(lower(target))
                    .or_default()
                    .push(json!({"id": rule_id}));
            }
        }
    }
    for collection in ["frontendIPConfigurations", "backendAddressPools", "probes"] {
        let Some(children) = body
            .get_mut("properties")
            .and_then(|p| p.get_mut(collection))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for child in children {
            let child_id = format!(
                "{id}/{collection}/{}",
                child
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            );
            let list = refs.remove(&lower(&child_id)).unwrap_or_default();
            if let Some(props) = child
                .as_object_mut()
                .map(|o| o.entry("properties").or_insert_with(|| json!({})))
                .and_then(Value::as_object_mut)
            {
                if list.is_empty() {
                    props.remove("loadBalancingRules");
                } else {
                    props.insert("loadBalancingRules".into(), Value::Array(list));
                }
            }
        }
    }
}

fn subnet_prefix(state: &State, subnet_id: &str) -> Option<IpNet> {
    let (vnet_id, subnet) = subnet_id.rsplit_once("/subnets/")?;
    let vnet = state.by_id(vnet_id)?;
    array_at(&vnet.body, &["properties", "subnets"])
        .iter()
        .find(|s| str_at(s, &["name"]).is_some_and(|n| n.eq_ignore_ascii_case(subnet)))
        .and_then(|s| str_at(s, &["properties", "addressPrefix"]))
        .and_then(|p| p.parse().ok())
}

/// Every private address held outside load balancer `except_lb`, with the IP configuration
/// holding it: the NICs' IP configurations and the other load balancers' frontends (Azure
/// allocates an address to one IP configuration of a virtual network at a time).
fn private_ips_in_use(state: &State, except_lb: &str) -> BTreeMap<IpAddr, String> {
    let frontends = state
        .of_kind(Kind::LoadBalancer)
        .filter(|lb| str_at(&lb.body, &["id"]).is_none_or(|i| !i.eq_ignore_ascii_case(except_lb)))
        .flat_map(|lb| array_at(&lb.body, &["properties", "frontendIPConfigurations"]).to_vec());
    let nic_configurations = state
        .of_kind(Kind::NetworkInterface)
        .flat_map(|nic| array_at(&nic.body, &["properties", "ipConfigurations"]).to_vec());
    frontends
        .chain(nic_configurations)
        .filter_map(|configuration| {
            let address = str_at(&configuration, &["properties", "privateIPAddress"])?
                .parse()
                .ok()?;
            let holder = str_at(&configuration, &["id"]).unwrap_or_default();
            Some((address, holder.to_string()))
        })
        .collect()
}

/// Whether Azure reserves `address` in subnet `prefix`: its first four addresses (the network
/// address, the default gateway, two for Azure DNS) and its last one.
fn is_reserved(prefix: IpNet, address: IpAddr) -> bool {
    let offset = |a: IpAddr| -> Option<u128> {
        match (a, prefix.network()) {
            (IpAddr::V4(a), IpAddr::V4(n)) => {
                u32::from(a).checked_sub(u32::from(n)).map(u128::from)
            }
            (IpAddr::V6(a), IpAddr::V6(n)) => u128::from(a).checked_sub(u128::from(n)),
            _ => None,
        }
    };
    match (offset(address), offset(prefix.broadcast())) {
        (Some(at), Some(last)) => at < 4 || at == last,
        _ => false,
    }
}

/// The lowest address of `prefix` that Azure does not reserve and `held` does not claim: what
/// dynamic allocation hands out.
fn first_free(prefix: IpNet, held: impl Fn(&IpAddr) -> bool) -> Option<IpAddr> {
    prefix
        .hosts()
        .find(|a| !is_reserved(prefix, *a) && !held(a))
}

/// Checks a public IP body, keeps or allocates its address, applies the quota and DNS rules.
pub fn public_ip(
    state: &mut State,
    id: &str,
    body: &mut Value,
    existing: Option<&Stored>,
) -> Result<(), ArmError> {
    let count = state.of_kind(Kind::PublicIp).count();
    if existing.is_none() && count >= state.config.quotas.public_ips {
        return Err(ArmError::bad_request(
            "PublicIPCountLimitReached",
            format!(
                "Cannot create more than {} public IP addresses for this subscription in this region.",
                state.config.quotas.public_ips
            ),
        ));
    }
    if let Some(old) = existing
        && sku(&old.body) != sku(body)
    {
        return Err(ArmError::bad_request(
            "PublicIPSkuCannotBeChanged",
            format!("The SKU of public IP address {id} cannot be changed."),
        ));
    }
    let location = str_at(body, &["location"]).unwrap_or_default().to_string();
    if let Some(label) =
        str_at(body, &["properties", "dnsSettings", "domainNameLabel"]).map(str::to_string)
    {
        let clash = state.of_kind(Kind::PublicIp).any(|p| {
            str_at(&p.body, &["id"]).is_some_and(|i| !i.eq_ignore_ascii_case(id))
                && str_at(&p.body, &["properties", "dnsSettings", "domainNameLabel"])
                    == Some(label.as_str())
                && str_at(&p.body, &["location"]) == Some(location.as_str())
        });
        if clash {
            return Err(ArmError::bad_request(
                "DnsRecordInUse",
                format!(
                    "DNS record {label}.{location}.cloudapp.azure.com is already used by another public IP."
                ),
            ));
        }
        if let Some(dns) = body
            .pointer_mut("/properties/dnsSettings")
            .and_then(Value::as_object_mut)
        {
            dns.insert(
                "fqdn".into(),
                json!(format!("{label}.{location}.cloudapp.azure.com")),
            );
        }
    }
    let address = match existing.and_then(|e| str_at(&e.body, &["properties", "ipAddress"])) {
        Some(a) => Some(a.to_string()),
        None if str_at(body, &["properties", "publicIPAllocationMethod"]) == Some("Static") => {
            match state.allocate_public_ip() {
                Some(a) => Some(a.to_string()),
                None => {
                    return Err(ArmError::bad_request(
                        "PublicIPCountLimitReached",
                        "The public address pool of this region is exhausted.",
                    ));
                }
            }
        }
        None => None,
    };
    let holder = existing.and_then(|e| at(&e.body, &["properties", "ipConfiguration"]).cloned());
    if let Some(props) = body
        .as_object_mut()
        .map(|o| o.entry("properties").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    {
        match address {
            Some(a) => props.insert("ipAddress".into(), json!(a)),
            None => props.remove("ipAddress"),
        };
        match holder {
            Some(h) => props.insert("ipConfiguration".into(), h),
            None => props.remove("ipConfiguration"),
        };
        props
            .entry("publicIPAddressVersion")
            .or_insert(json!("IPv4"));
        props.entry("idleTimeoutInMinutes").or_insert(json!(4));
    }
    Ok(())
}

/// Adds the default rules every NSG has.
pub fn security_group(state: &State, id: &str, body: &mut Value, _existing: Option<&Stored>) {
    let _ = state;
    let defaults: Vec<Value> = [
        (
            "AllowVnetInBound",
            65000,
            "Inbound",
            "VirtualNetwork",
            "VirtualNetwork",
            "Allow",
        ),
        (
            "AllowAzureLoadBalancerInBound",
            65001,
            "Inbound",
            "AzureLoadBalancer",
            "*",
            "Allow",
        ),
        ("DenyAllInBound", 65500, "Inbound", "*", "*", "Deny"),
        (
            "AllowVnetOutBound",
            65000,
            "Outbound",
            "VirtualNetwork",
            "VirtualNetwork",
            "Allow",
        ),
        (
            "AllowInternetOutBound",
            65001,
            "Outbound",
            "*",
            "Internet",
            "Allow",
        ),
        ("DenyAllOutBound", 65500, "Outbound", "*", "*", "Deny"),
    ]
    .into_iter()
    .map(|(name, priority, direction, src, dst, access)| {
        json!({"name": name, "id": format!("{id}/defaultSecurityRules/{name}"), "properties": {
            "protocol": "*", "sourcePortRange": "*", "destinationPortRange": "*",
            "sourceAddressPrefix": src, "destinationAddressPrefix": dst, "access": access,
            "priority": priority, "direction": direction, "provisioningState": "Succeeded"}})
    })
    .collect();
    if let Some(props) = body
        .as_object_mut()
        .map(|o| o.entry("properties").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    {
        props.insert("defaultSecurityRules".into(), Value::Array(defaults));
        props.entry("securityRules").or_insert(json!([]));
    }
}

/// Recomputes each public IP's `ipConfiguration` from the frontends that reference it; a
/// change bumps the public IP's etag, as attaching does in ARM.
pub fn sync_public_ip_references(state: &mut State) {
    let mut holders: BTreeMap<String, String> = BTreeMap::new();
    for lb in state.of_kind(Kind::LoadBalancer) {
        for fe in array_at(&lb.body, &["properties", "frontendIPConfigurations"]) {
            if let (Some(pip), Some(fe_id)) = (
                str_at(fe, &["properties", "publicIPAddress", "id"]),
                str_at(fe, &["id"]),
            ) {
                holders.insert(lower(pip), fe_id.to_string());
            }
        }
    }
    let keys: Vec<String> = state
        .resources
        .iter()
        .filter(|(_, r)| r.kind == Kind::PublicIp)
        .map(|(k, _)| k.clone())
        .collect();
    for key in keys {
        let want = holders.get(&key).cloned();
        let Some(current) = state.resources.get(&key) else {
            continue;
        };
        let have =
            str_at(&current.body, &["properties", "ipConfiguration", "id"]).map(str::to_string);
        if have == want {
            continue;
        }
        let etag = state.new_etag();
        if let Some(r) = state.resources.get_mut(&key) {
            if let Some(obj) = r.body.as_object_mut() {
                obj.insert("etag".into(), json!(etag));
            }
            if let Some(props) = r.body.get_mut("properties").and_then(Value::as_object_mut) {
                match want {
                    Some(fe) => props.insert("ipConfiguration".into(), json!({"id": fe})),
                    None => props.remove("ipConfiguration"),
                };
            }
        }
    }
}

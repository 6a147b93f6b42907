//! The rules of the smaller kinds this server keeps, as kube-apiserver 1.33 checks them:
//! `ValidateConfigMap` and `ValidateConfigMapUpdate`, `ValidateNode` / `ValidateNodeUpdate`
//! (taints and pod CIDRs; pkg/apis/core/validation) and `ValidateLeaseSpec`
//! (pkg/apis/coordination/validation), and a Namespace's `spec.finalizers` as its `/finalize`
//! subresource checks them. Node's `podCIDR` and `podCIDRs` are kept in step as the
//! v1 conversion does ([`sync_pod_cidrs`]).

use base64::Engine as _;
use ipnet::IpNet;
use serde_json::{Value, json};

use crate::meta;
use crate::status::Cause;

/// kube-apiserver's cap on a ConfigMap's data and binary data together (`MaxSecretSize`).
pub const CONFIG_MAP_MAX_BYTES: usize = 1024 * 1024;

const CONFIG_KEY_DETAIL: &str = "a valid config key must consist of alphanumeric characters, \
    '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation \
    is '[-._a-zA-Z0-9]+')";

/// `IsConfigMapKey`'s messages for `key`.
fn config_key_problems(key: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if key.len() > 253 {
        problems.push("must be no more than 253 characters".to_string());
    }
    let pattern_ok = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    if !pattern_ok {
        problems.push(CONFIG_KEY_DETAIL.to_string());
    }
    match key {
        "." => problems.push("must not be '.'".to_string()),
        ".." => problems.push("must not be '..'".to_string()),
        _ if key.starts_with("..") => problems.push("must not start with '..'".to_string()),
        _ => {}
    }
    problems
}

/// `ValidateConfigMap` (and, with `old`, `ValidateConfigMapUpdate`'s immutability): keys are
/// config keys, none in both `data` and `binaryData`, at most [`CONFIG_MAP_MAX_BYTES`] of
/// values; an immutable ConfigMap keeps its data and stays immutable.
pub fn validate_config_map(old: Option<&Value>, config_map: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    // ValidateConfigMapUpdate reports these before the ConfigMap's own rules.
    if let Some(old) = old.filter(|old| old["immutable"] == json!(true)) {
        const IMMUTABLE: &str = "field is immutable when `immutable` is set";
        if config_map["immutable"] != json!(true) {
            causes.push(Cause::forbidden("immutable", IMMUTABLE));
        }
        for field in ["data", "binaryData"] {
            let unset = |v: &Value| v.is_null() || v.as_object().is_some_and(|m| m.is_empty());
            let same = old[field] == config_map[field]
                || (unset(&old[field]) && unset(&config_map[field]));
            if !same {
                causes.push(Cause::forbidden(field, IMMUTABLE));
            }
        }
    }
    let empty = serde_json::Map::new();
    let data = config_map["data"].as_object().unwrap_or(&empty);
    let binary = config_map["binaryData"].as_object().unwrap_or(&empty);
    let mut total = 0usize;
    for (key, value) in data {
        let field = format!("data[{key}]");
        for problem in config_key_problems(key) {
            causes.push(Cause::invalid(field.clone(), key, &problem));
        }
        if binary.contains_key(key) {
            causes.push(Cause::invalid(
                field,
                key,
                "duplicate of key present in binaryData",
            ));
        }
        total += value.as_str().map_or(0, str::len);
    }
    for (key, value) in binary {
        for problem in config_key_problems(key) {
            causes.push(Cause::invalid(format!("binaryData[{key}]"), key, &problem));
        }
        // The stored bytes, not their base64 text.
        total += value
            .as_str()
            .and_then(|text| base64::engine::general_purpose::STANDARD.decode(text).ok())
            .map_or(0, |bytes| bytes.len());
    }
    if total > CONFIG_MAP_MAX_BYTES {
        causes.push(Cause::too_long("", CONFIG_MAP_MAX_BYTES));
    }
    causes
}

/// `ValidateLeaseSpec`: a duration above zero and no negative transition count.
pub fn validate_lease(lease: &Value) -> Vec<Cause> {
    let spec = &lease["spec"];
    let mut causes = Vec::new();
    if let Some(duration) = spec["leaseDurationSeconds"].as_i64().filter(|d| *d <= 0) {
        causes.push(Cause::invalid_literal(
            "spec.leaseDurationSeconds",
            &duration.to_string(),
            "must be greater than 0",
        ));
    }
    if let Some(transitions) = spec["leaseTransitions"].as_i64().filter(|t| *t < 0) {
        causes.push(Cause::invalid_literal(
            "spec.leaseTransitions",
            &transitions.to_string(),
            "must be greater than or equal to 0",
        ));
    }
    causes
}

/// Finalizer names without a `/` that need no domain (`IsStandardFinalizerName`).
const STANDARD_FINALIZERS: [&str; 3] = ["kubernetes", "orphan", "foregroundDeletion"];

/// A Namespace's `spec.finalizers` (`validateFinalizerName`, as `/finalize` checks them): each a
/// qualified name, and one without a domain must be a standard finalizer.
pub fn validate_namespace_finalizers(namespace: &Value) -> Vec<Cause> {
    let Some(finalizers) = namespace
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let mut causes = Vec::new();
    for (index, name) in finalizers.iter().enumerate() {
        let Some(name) = name.as_str() else { continue };
        let field = format!("spec.finalizers[{index}]");
        for problem in meta::qualified_name_problems(name) {
            causes.push(Cause::invalid(field.clone(), name, &problem));
        }
        if !name.contains('/') && !STANDARD_FINALIZERS.contains(&name) {
            causes.push(Cause::invalid(
                field,
                name,
                "name is neither a standard finalizer name nor is it fully qualified",
            ));
        }
    }
    causes
}

/// The v1 conversion's rule for a Node's pod CIDRs: `podCIDRs` is the list, `podCIDR` its
/// first entry; a client that sets only `podCIDR` gets the list made from it.
pub fn sync_pod_cidrs(node: &mut Value) {
    let Some(spec) = node.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let listed: Vec<Value> = spec
        .get("podCIDRs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    match listed.first() {
        Some(first) => {
            spec.insert("podCIDR".into(), first.clone());
        }
        None => {
            if let Some(single) = spec
                .get("podCIDR")
                .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
            {
                let list = json!([single.clone()]);
                spec.insert("podCIDRs".into(), list);
            }
        }
    }
}

/// `ValidateNode`'s checks of what clients write: taints (under `metadata.taints`, as
/// upstream words it) and pod CIDRs (valid, at most one per IP family).
pub fn validate_node(node: &Value) -> Vec<Cause> {
    let mut causes = validate_taints(&node["spec"]["taints"]);
    let cidrs: Vec<&str> = node["spec"]["podCIDRs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut parsed = Vec::new();
    for (i, cidr) in cidrs.iter().enumerate() {
        match cidr.parse::<IpNet>() {
            Ok(net) => parsed.push(net),
            Err(_) => causes.push(Cause::invalid(
                format!("spec.podCIDRs[{i}]"),
                cidr,
                meta::CIDR_DETAIL,
            )),
        }
    }
    let dual_stack_pair = parsed.len() == 2
        && matches!(
            (parsed[0], parsed[1]),
            (IpNet::V4(_), IpNet::V6(_)) | (IpNet::V6(_), IpNet::V4(_))
        );
    if cidrs.len() > 1 && parsed.len() == cidrs.len() && !dual_stack_pair {
        causes.push(Cause::invalid_literal(
            "spec.podCIDRs",
            &meta::go_strings(&cidrs),
            "may specify no more than one CIDR for each IP family",
        ));
    }
    causes
}

/// `validateNodeTaints`: key a label key, value a label value, a known effect, and each
/// key/effect pair once.
fn validate_taints(taints: &Value) -> Vec<Cause> {
    const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
    let mut causes = Vec::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for (i, taint) in taints.as_array().into_iter().flatten().enumerate() {
        let at = format!("metadata.taints[{i}]");
        let key = taint["key"].as_str().unwrap_or_default();
        for problem in meta::qualified_name_problems(key) {
            causes.push(Cause::invalid(format!("{at}.key"), key, &problem));
        }
        let value = taint["value"].as_str().unwrap_or_default();
        let value_problems = meta::label_value_problems(value);
        if !value_problems.is_empty() {
            causes.push(Cause::invalid(
                format!("{at}.value"),
                value,
                &value_problems.join(";"),
            ));
        }
        let effect = taint["effect"].as_str().unwrap_or_default();
        if effect.is_empty() {
            causes.push(Cause::required(format!("{at}.effect")));
        } else if !EFFECTS.contains(&effect) {
            causes.push(Cause::not_supported(
                format!("{at}.effect"),
                effect,
                &EFFECTS,
            ));
        }
        if seen.contains(&(key, effect)) {
            causes.push(Cause {
                reason: "FieldValueDuplicate",
                message: format!(
                    "Duplicate value: core.Taint{{Key:{key:?}, Value:{value:?}, Effect:{effect:?}, TimeAdded:(*v1.Time)(nil)}}: taints must be unique by key and effect pair"
                ),
                field: at,
            });
            continue;
        }
        seen.push((key, effect));
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(causes: &[Cause]) -> Vec<(String, String)> {
        causes
            .iter()
            .map(|c| (c.field.clone(), c.message.clone()))
            .collect()
    }

    #[test]
    fn config_maps() {
        let ok = json!({"data": {"a.b_C-1": "x"}, "binaryData": {"bin": "eA=="}});
        assert!(validate_config_map(None, &ok).is_empty());
        let causes = validate_config_map(
            None,
            &json!({"data": {"a b": "x", "k": "v", "..x": ""}, "binaryData": {"k": "eA=="}}),
        );
        assert_eq!(
            fields(&causes),
            [
                (
                    "data[..x]".to_string(),
                    "Invalid value: \"..x\": must not start with '..'".to_string()
                ),
                (
                    "data[a b]".to_string(),
                    format!("Invalid value: \"a b\": {CONFIG_KEY_DETAIL}")
                ),
                (
                    "data[k]".to_string(),
                    "Invalid value: \"k\": duplicate of key present in binaryData".to_string()
                ),
            ]
        );
        // The size counts decoded bytes: 1 MiB of binary data is at the limit, one more is over.
        let binary = |n: usize| json!({"binaryData": {"b": base64::engine::general_purpose::STANDARD.encode(vec![0u8; n])}});
        assert!(validate_config_map(None, &binary(CONFIG_MAP_MAX_BYTES)).is_empty());
        assert_eq!(
            fields(&validate_config_map(
                None,
                &binary(CONFIG_MAP_MAX_BYTES + 1)
            )),
            [(
                String::new(),
                "Too long: may not be more than 1048576 bytes".to_string()
            )]
        );
        // Immutable: data and the flag stay.
        let old = json!({"immutable": true, "data": {"k": "v"}});
        assert!(validate_config_map(Some(&old), &old).is_empty());
        let changed = json!({"immutable": true, "data": {"k": "w"}});
        assert_eq!(
            fields(&validate_config_map(Some(&old), &changed))[0].0,
            "data"
        );
        let unset = json!({"data": {"k": "v"}});
        assert_eq!(
            fields(&validate_config_map(Some(&old), &unset))[0].0,
            "immutable"
        );
    }

    #[test]
    fn leases() {
        assert!(
            validate_lease(&json!({"spec": {"leaseDurationSeconds": 15, "leaseTransitions": 0}}))
                .is_empty()
        );
        assert_eq!(
            fields(&validate_lease(
                &json!({"spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}})
            )),
            [
                (
                    "spec.leaseDurationSeconds".to_string(),
                    "Invalid value: 0: must be greater than 0".to_string()
                ),
                (
                    "spec.leaseTransitions".to_string(),
                    "Invalid value: -1: must be greater than or equal to 0".to_string()
                ),
            ]
        );
    }

    #[test]
    fn nodes() {
        let mut node = json!({"spec": {"podCIDR": "10.244.1.0/24"}});
        sync_pod_cidrs(&mut node);
        assert_eq!(node["spec"]["podCIDRs"], json!(["10.244.1.0/24"]));
        let mut node =
            json!({"spec": {"podCIDR": "x", "podCIDRs": ["10.244.1.0/24", "fd00::/64"]}});
        sync_pod_cidrs(&mut node);
        assert_eq!(node["spec"]["podCIDR"], "10.244.1.0/24");
        assert!(validate_node(&node).is_empty());

        let bad = json!({"spec": {"podCIDRs": ["notacidr"], "taints": [
            {"key": "dedicated", "value": "lb", "effect": "NoSchedule"},
            {"key": "bad key", "effect": "Sometimes"},
            {"key": "dedicated", "value": "other", "effect": "NoSchedule"},
            {"key": "k", "value": "-v"},
        ]}});
        let got: Vec<String> = validate_node(&bad)
            .iter()
            .map(|c| c.field.clone())
            .collect();
        assert_eq!(
            got,
            [
                "metadata.taints[1].key",
                "metadata.taints[1].effect",
                "metadata.taints[2]",
                "metadata.taints[3].value",
                "metadata.taints[3].effect",
                "spec.podCIDRs[0]",
            ]
        );
        let two_v4 = json!({"spec": {"podCIDRs": ["10.0.0.0/24", "10.0.1.0/24"]}});
        assert_eq!(
            fields(&validate_node(&two_v4)),
            [(
                "spec.podCIDRs".to_string(),
                "Invalid value: []string{\"10.0.0.0/24\", \"10.0.1.0/24\"}: may specify no more than one CIDR for each IP family".to_string()
            )]
        );
    }
}

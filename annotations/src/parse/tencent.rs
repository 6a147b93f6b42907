//! Tencent TKE annotations (reference other-clouds.md §2.3–§2.5), read by
//! `providers/tencent`.

use serde_json::{Map, Value};

use super::Reader;
use super::service::Core;
use crate::diagnostics::{ErrorKind, Location};
use crate::keys::tencent;
use crate::spec::{
    InternetChargeType, LabelRequirement, Scheme, SelectorOperator, TencentLoadBalanceType,
    TencentSpec,
};

/// Largest `internet-max-bandwidth-out` (Mbps): the seed's range is [1, 2000]. Newer TKE docs
/// say 2048, but what an account may buy above 2000 depends on it; the seed is the contract.
const MAX_BANDWIDTH_OUT: i64 = 2000;

/// Why `loadbalance-type: classic` is refused: what kube-lb builds, and why a classic CLB
/// cannot be it (reference other-clouds.md §0.1 item 3 and the annotation table).
const CLASSIC_REFUSED: &str = "kube-lb builds application CLBs only (CreateLoadBalancer with \
Forward=1, one listener per port with the Service's NodePorts bound as targets); the CLB API no \
longer creates classic CLBs (it accepts only Forward=1), and a classic CLB cannot carry the \
listener and target model the provider uses. Remove the annotation or set it to application";

/// Tags kube-lb (like TKE) writes on the CLBs it creates, and finds them by; extensiveParameters
/// may add tags but never these.
const OWNERSHIP_TAGS: &[&str] = &["tke-createdBy-flag", "tke-clusterId", "tke-lb-serviceuuid"];

/// CreateListener keys that name the listener or say whose it is; listenerParameters may not
/// set them (the Service's ports and kube-lb's listener name decide).
const LISTENER_IDENTITY_KEYS: &[&str] = &["LoadBalancerId", "Ports", "Protocol", "ListenerNames"];

/// Warns that `spec.loadBalancerIP` has no effect for clouds whose providers ignore it.
fn warn_ip_ignored(reader: &mut Reader<'_>, core: &Core, cloud: &str) {
    if let Some(ip) = core.requested_ip {
        reader.diag.warn(
            Location::field("spec.loadBalancerIP"),
            Some(&ip.to_string()),
            format!(
                "ignored by the {cloud} provider (the seed: unsupported loadBalancerIP is ignored)"
            ),
        );
    }
}

/// Tencent TKE: the eight seed annotations plus the internal subnet.
///
/// - internal subnet id must look like `subnet-…` (early: the CLB API rejects it);
/// - backends-label is parsed with the `kubectl -l` grammar (error on bad syntax);
/// - existed lbid must look like `lb-…` (early);
/// - extensive/listener parameters must be a JSON object (empty = unset, as in the seed);
///   `LoadBalancerType` there contradicting the internal-subnet annotation is an error;
/// - loadbalance-type `classic` is an error: kube-lb builds application CLBs only, and new
///   classic CLBs cannot be created any more;
/// - charge type is one of two words (error otherwise);
/// - extensiveParameters may not touch ownership: `Tags` naming an ownership tag, `Number`
///   other than 1, `Forward` other than 1, a `SubnetId` contradicting the internal-subnet
///   annotation are errors naming the key; listenerParameters may not set the listener's
///   identity (`LoadBalancerId`, `Ports`, `Protocol`, `ListenerNames`);
/// - bandwidth 1–2000 Mbps, the seed's range (error otherwise), public CLBs only (warn on
///   internal);
/// - local-svc-only-bind-node-with-pod is a Go bool; it only matters with `Local` (warn).
pub(crate) fn parse_tencent(reader: &mut Reader<'_>, core: &Core) -> (TencentSpec, Scheme) {
    warn_ip_ignored(reader, core, "tencent");
    let internal_subnet_id = reader
        .non_empty(tencent::INTERNAL_SUBNET_ID)
        .and_then(|raw| {
            if raw.starts_with("subnet-") {
                Some(raw.to_owned())
            } else {
                reader.diag.error(
                    Location::annotation(tencent::INTERNAL_SUBNET_ID),
                    Some(raw),
                    ErrorKind::Invalid,
                    "must be a subnet ID such as \"subnet-xxxxxxxx\"",
                );
                None
            }
        });
    let backends_label = match reader.non_empty(tencent::BACKENDS_LABEL) {
        None => Vec::new(),
        Some(raw) => match parse_label_selector(raw) {
            Ok(requirements) => requirements,
            Err(problem) => {
                reader.diag.error(
                    Location::annotation(tencent::BACKENDS_LABEL),
                    Some(raw),
                    ErrorKind::Invalid,
                    format!("{problem}; expected a label selector such as \"key in (value1, value2)\" or \"group=access-layer\""),
                );
                Vec::new()
            }
        },
    };
    let existed_lb_id = reader.non_empty(tencent::EXISTED_LBID).and_then(|raw| {
        if raw.starts_with("lb-") {
            Some(raw.to_owned())
        } else {
            reader.diag.error(
                Location::annotation(tencent::EXISTED_LBID),
                Some(raw),
                ErrorKind::Invalid,
                "must be a CLB ID such as \"lb-6swtxxxx\"",
            );
            None
        }
    });
    if existed_lb_id.is_some() && internal_subnet_id.is_some() {
        reader.diag.warn(
            Location::annotation(tencent::INTERNAL_SUBNET_ID),
            internal_subnet_id.as_deref(),
            "has no effect when an existing CLB is used (tke-existed-lbid)",
        );
    }
    let extensive_parameters = json_object(reader, tencent::EXTENSIVE_PARAMETERS);
    if let Some(Value::String(lb_type)) = extensive_parameters
        .as_ref()
        .and_then(|m| m.get("LoadBalancerType"))
    {
        let wants_internal = lb_type == "INTERNAL";
        if wants_internal != internal_subnet_id.is_some() {
            reader.diag.error(
                Location::annotation(tencent::EXTENSIVE_PARAMETERS),
                reader.all().get(tencent::EXTENSIVE_PARAMETERS).map(String::as_str),
                ErrorKind::Conflict,
                "LoadBalancerType contradicts the internal-subnetid annotation (INTERNAL needs a subnet, OPEN must not have one)",
            );
        }
    }
    if let Some(extensive) = &extensive_parameters {
        refuse_ownership_changes(reader, extensive, internal_subnet_id.as_deref());
    }
    let listener_parameters = json_object(reader, tencent::LISTENER_PARAMETERS);
    if let Some(listener) = &listener_parameters
        && let Some(key) = LISTENER_IDENTITY_KEYS
            .iter()
            .find(|k| listener.contains_key(**k))
    {
        reader.diag.error(
            Location::annotation(tencent::LISTENER_PARAMETERS),
            reader.all().get(tencent::LISTENER_PARAMETERS).map(String::as_str),
            ErrorKind::Conflict,
            format!("{key} is decided by the Service's ports and kube-lb's listener name; remove it (allowed: the other CreateListener parameters such as HealthCheck, Scheduler, SessionExpireTime)"),
        );
    }
    if existed_lb_id.is_some()
        && let Some(raw) = reader.all().get(tencent::EXTENSIVE_PARAMETERS)
        && !raw.trim().is_empty()
    {
        reader.diag.warn(
            Location::annotation(tencent::EXTENSIVE_PARAMETERS),
            Some(raw),
            "has no effect when an existing CLB is used (tke-existed-lbid): kube-lb creates no CLB",
        );
    }
    let recorded_load_balancer_id = recorded_load_balancer_id(reader);
    let created_with_extensive_parameters =
        recorded_object(reader, tencent::CREATED_WITH_EXTENSIVE_PARAMETERS);
    let created_with_listener_parameters =
        recorded_object(reader, tencent::CREATED_WITH_LISTENER_PARAMETERS);
    if existed_lb_id.is_none() {
        warn_create_only_change(
            reader,
            tencent::EXTENSIVE_PARAMETERS,
            extensive_parameters.as_ref(),
            created_with_extensive_parameters.as_ref(),
            "the CLB was created with",
            "CreateLoadBalancer parameters apply only when the CLB is created, so the existing CLB keeps them; delete and recreate the Service to apply the new ones",
        );
    }
    warn_create_only_change(
        reader,
        tencent::LISTENER_PARAMETERS,
        listener_parameters.as_ref(),
        created_with_listener_parameters.as_ref(),
        "the Service's listeners were created with",
        "CreateListener parameters apply only when a listener is created, so existing listeners keep them and only listeners of new ports get the new ones",
    );
    let load_balance_type = reader.non_empty(tencent::LOADBALANCE_TYPE).and_then(|raw| {
        match raw.parse::<TencentLoadBalanceType>() {
            Ok(TencentLoadBalanceType::Classic) => {
                reader.diag.error(
                    Location::annotation(tencent::LOADBALANCE_TYPE),
                    Some(raw),
                    ErrorKind::Unsupported,
                    CLASSIC_REFUSED,
                );
                None
            }
            Ok(t) => Some(t),
            Err(error) => {
                reader.diag.error(
                    Location::annotation(tencent::LOADBALANCE_TYPE),
                    Some(raw),
                    ErrorKind::Invalid,
                    format!("must be {}", error.allowed_text()),
                );
                None
            }
        }
    });
    let internet_charge_type = reader
        .non_empty(tencent::INTERNET_CHARGE_TYPE)
        .and_then(|raw| {
            raw.parse::<InternetChargeType>()
                .map_err(|error| {
                    reader.diag.error(
                        Location::annotation(tencent::INTERNET_CHARGE_TYPE),
                        Some(raw),
                        ErrorKind::Invalid,
                        format!("must be {}", error.allowed_text()),
                    )
                })
                .ok()
        });
    let internet_max_bandwidth_out = reader.int_in(
        tencent::INTERNET_MAX_BANDWIDTH_OUT,
        1..=MAX_BANDWIDTH_OUT,
        "Mbps",
    );
    if internal_subnet_id.is_some() {
        for k in [
            tencent::INTERNET_MAX_BANDWIDTH_OUT,
            tencent::INTERNET_CHARGE_TYPE,
        ] {
            if let Some(raw) = reader.all().get(k) {
                reader.diag.warn(
                    Location::annotation(k),
                    Some(raw),
                    "applies to public CLBs only; ignored for an internal CLB",
                );
            }
        }
    }
    let local_svc_only_bind_node_with_pod =
        reader.go_bool(tencent::LOCAL_SVC_ONLY_BIND_NODE_WITH_POD, false);
    if local_svc_only_bind_node_with_pod && !core.is_local() {
        reader.diag.warn(
            Location::annotation(tencent::LOCAL_SVC_ONLY_BIND_NODE_WITH_POD),
            reader
                .all()
                .get(tencent::LOCAL_SVC_ONLY_BIND_NODE_WITH_POD)
                .map(String::as_str),
            "only has an effect with externalTrafficPolicy: Local",
        );
    }
    let scheme = if internal_subnet_id.is_some() {
        Scheme::Internal
    } else {
        Scheme::External
    };
    let spec = TencentSpec {
        internal_subnet_id,
        backends_label,
        existed_lb_id,
        extensive_parameters,
        listener_parameters,
        load_balance_type,
        internet_charge_type,
        internet_max_bandwidth_out,
        local_svc_only_bind_node_with_pod,
        recorded_load_balancer_id,
        created_with_extensive_parameters,
        created_with_listener_parameters,
    };
    (spec, scheme)
}

/// `service.kubernetes.io/loadbalance-id` (written back by TKE and by kube-lb): where the
/// Service's listeners were last put. Anything but a CLB id is ignored with a warning.
fn recorded_load_balancer_id(reader: &mut Reader<'_>) -> Option<String> {
    let raw = reader.non_empty(tencent::LOADBALANCE_ID)?;
    if raw.starts_with("lb-") {
        return Some(raw.to_owned());
    }
    reader.diag.warn(
        Location::annotation(tencent::LOADBALANCE_ID),
        Some(raw),
        "is written back by the controller with the CLB id (\"lb-…\"); this value is ignored",
    );
    None
}

/// A JSON object kube-lb wrote back; unreadable records are ignored with a warning.
fn recorded_object(reader: &mut Reader<'_>, key: &'static str) -> Option<Map<String, Value>> {
    let raw = reader.non_empty(key)?;
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(map)) => Some(map),
        _ => {
            reader.diag.warn(
                Location::annotation(key),
                Some(raw),
                "is written back by kube-lb as a JSON object; this value is ignored",
            );
            None
        }
    }
}

/// Warns when a create-only JSON annotation no longer says what the resource was created
/// with: the change is not applied, and the Service condition lists it. Nothing is said when
/// nothing was recorded yet, or when the annotation itself is invalid (that is an error).
fn warn_create_only_change(
    reader: &mut Reader<'_>,
    key: &'static str,
    current: Option<&Map<String, Value>>,
    created_with: Option<&Map<String, Value>>,
    what: &str,
    consequence: &str,
) {
    let Some(created_with) = created_with else {
        return;
    };
    let raw = reader.all().get(key).map(String::as_str);
    let written = raw.is_some_and(|r| !r.trim().is_empty());
    if written && current.is_none() {
        return;
    }
    let empty = Map::new();
    if current.unwrap_or(&empty) == created_with {
        return;
    }
    reader.diag.warn(
        Location::annotation(key),
        raw,
        format!(
            "create-only and changed later: {what} {}; {consequence}",
            Value::Object(created_with.clone())
        ),
    );
}

/// Errors for extensiveParameters keys that would change whose the CLB is or what it is.
fn refuse_ownership_changes(
    reader: &mut Reader<'_>,
    extensive: &Map<String, Value>,
    internal_subnet_id: Option<&str>,
) {
    let key = tencent::EXTENSIVE_PARAMETERS;
    let raw = reader.all().get(key).cloned();
    let mut refuse = |detail: String| {
        reader.diag.error(
            Location::annotation(key),
            raw.as_deref(),
            ErrorKind::Conflict,
            detail,
        );
    };
    match extensive.get("Tags") {
        None => {}
        Some(Value::Array(tags)) => {
            for tag in tags {
                match tag.get("TagKey").and_then(Value::as_str) {
                    Some(owned) if OWNERSHIP_TAGS.contains(&owned) => refuse(format!(
                        "Tags: TagKey {owned:?} is an ownership tag kube-lb sets itself; allowed: other tag keys"
                    )),
                    Some(_) => {}
                    None => refuse(
                        "Tags: every entry must be an object {\"TagKey\": …, \"TagValue\": …}"
                            .to_owned(),
                    ),
                }
            }
        }
        Some(_) => refuse("Tags must be an array of {\"TagKey\", \"TagValue\"} objects".to_owned()),
    }
    for single in ["Number", "Forward"] {
        if let Some(value) = extensive.get(single)
            && value.as_i64() != Some(1)
        {
            refuse(format!(
                "{single} = {value}: only 1 is allowed (one application CLB per Service)"
            ));
        }
    }
    if let Some(subnet) = extensive.get("SubnetId") {
        let same = subnet
            .as_str()
            .is_some_and(|s| Some(s) == internal_subnet_id);
        if !same {
            refuse(format!(
                "SubnetId = {subnet}: the subnet is chosen with service.kubernetes.io/qcloud-loadbalancer-internal-subnetid; remove SubnetId here"
            ));
        }
    }
}

fn json_object(reader: &mut Reader<'_>, k: &'static str) -> Option<Map<String, Value>> {
    let raw = reader.non_empty(k)?;
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(map)) => Some(map),
        Ok(_) => {
            reader.diag.error(
                Location::annotation(k),
                Some(raw),
                ErrorKind::Invalid,
                "must be a JSON object such as {\"VipIsp\":\"CTCC\"}",
            );
            None
        }
        Err(error) => {
            reader.diag.error(
                Location::annotation(k),
                Some(raw),
                ErrorKind::Invalid,
                format!("must be a JSON object ({error})"),
            );
            None
        }
    }
}

/// Parses a label selector string (`kubectl -l` grammar): comma-separated requirements
/// `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a, b)`, `k notin (a, b)`.
pub fn parse_label_selector(input: &str) -> Result<Vec<LabelRequirement>, String> {
    let mut requirements = Vec::new();
    let mut rest = input.trim();
    while !rest.is_empty() {
        // A requirement ends at the first comma outside parentheses.
        let mut depth = 0usize;
        let mut end = rest.len();
        for (i, c) in rest.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        let item = rest[..end].trim();
        rest = rest.get(end + 1..).unwrap_or("").trim();
        if item.is_empty() {
            return Err("empty requirement".to_owned());
        }
        requirements.push(parse_requirement(item)?);
    }
    Ok(requirements)
}

fn valid_label_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn parse_requirement(item: &str) -> Result<LabelRequirement, String> {
    let requirement = |key: &str, operator, values: Vec<String>| {
        if !valid_label_part(key) {
            return Err(format!("{key:?} is not a label key"));
        }
        if let Some(bad) = values
            .iter()
            .find(|v| !v.is_empty() && !valid_label_part(v))
        {
            return Err(format!("{bad:?} is not a label value"));
        }
        Ok(LabelRequirement {
            key: key.to_owned(),
            operator,
            values,
        })
    };
    if let Some(key) = item.strip_prefix('!') {
        return requirement(key.trim(), SelectorOperator::DoesNotExist, Vec::new());
    }
    for (token, operator) in [
        ("!=", SelectorOperator::NotEquals),
        ("==", SelectorOperator::Equals),
        ("=", SelectorOperator::Equals),
    ] {
        if let Some((key, value)) = item.split_once(token) {
            return requirement(key.trim(), operator, vec![value.trim().to_owned()]);
        }
    }
    let mut words = item.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or_default().trim();
    let tail = words.next().unwrap_or_default().trim();
    if tail.is_empty() {
        return requirement(key, SelectorOperator::Exists, Vec::new());
    }
    let (operator, set) = if let Some(set) = tail.strip_prefix("notin") {
        (SelectorOperator::NotIn, set)
    } else if let Some(set) = tail.strip_prefix("in") {
        (SelectorOperator::In, set)
    } else {
        return Err(format!(
            "{item:?}: expected =, ==, !=, in or notin after the key"
        ));
    };
    let set = set.trim();
    let inner = set
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("{item:?}: the value set must be in parentheses"))?;
    let values: Vec<String> = inner.split(',').map(|v| v.trim().to_owned()).collect();
    if values.iter().all(String::is_empty) {
        return Err(format!("{item:?}: the value set is empty"));
    }
    requirement(key, operator, values)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::Cloud;
    use crate::keys::tencent;

    /// The warnings for a Service with `annotations`, rendered; parse errors fail the test.
    fn warnings(annotations: &[(&str, &str)]) -> Vec<String> {
        let mut svc: k8s_openapi::api::core::v1::Service =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
                "spec": {"type": "LoadBalancer",
                         "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]},
            }))
            .unwrap_or_else(|e| panic!("{e}"));
        svc.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        match crate::parse(Cloud::Tencent, &svc) {
            Ok(parsed) => parsed.warnings.iter().map(ToString::to_string).collect(),
            Err(errors) => panic!("{errors}"),
        }
    }

    #[test]
    fn a_create_only_parameter_changed_after_creation_is_a_warning_naming_both_values() {
        let extensive = tencent::EXTENSIVE_PARAMETERS;
        let listener = tencent::LISTENER_PARAMETERS;
        let created_extensive = tencent::CREATED_WITH_EXTENSIVE_PARAMETERS;
        let created_listener = tencent::CREATED_WITH_LISTENER_PARAMETERS;
        /// (what, annotations, the keys the warnings name in order)
        type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Vec<&'a str>);
        let cases: Vec<Case<'_>> = vec![
            (
                "nothing recorded yet",
                vec![(extensive, r#"{"VipIsp":"CTCC"}"#)],
                vec![],
            ),
            (
                "unchanged (key order aside)",
                vec![
                    (extensive, r#"{"VipIsp":"CTCC","SlaType":"clb.c2.medium"}"#),
                    (
                        created_extensive,
                        r#"{"SlaType":"clb.c2.medium","VipIsp":"CTCC"}"#,
                    ),
                ],
                vec![],
            ),
            (
                "changed",
                vec![
                    (extensive, r#"{"VipIsp":"CMCC"}"#),
                    (created_extensive, r#"{"VipIsp":"CTCC"}"#),
                ],
                vec![extensive],
            ),
            (
                "added after a CLB created without it",
                vec![
                    (extensive, r#"{"VipIsp":"CMCC"}"#),
                    (created_extensive, "{}"),
                ],
                vec![extensive],
            ),
            (
                "removed after creation",
                vec![(created_listener, r#"{"Scheduler":"LEAST_CONN"}"#)],
                vec![listener],
            ),
            (
                "listenerParameters changed",
                vec![
                    (listener, r#"{"Scheduler":"WRR"}"#),
                    (created_listener, r#"{"Scheduler":"LEAST_CONN"}"#),
                ],
                vec![listener],
            ),
            (
                "on a user's CLB extensiveParameters never applies, which is said instead",
                vec![
                    (tencent::EXISTED_LBID, "lb-users"),
                    (extensive, r#"{"VipIsp":"CMCC"}"#),
                    (created_extensive, r#"{"VipIsp":"CTCC"}"#),
                ],
                vec![extensive],
            ),
        ];
        for (what, annotations, keys) in cases {
            let found = warnings(&annotations);
            assert_eq!(found.len(), keys.len(), "{what}: {found:?}");
            for (warning, key) in found.iter().zip(keys) {
                assert!(warning.contains(key), "{what}: {warning}");
            }
        }
        let changed = warnings(&[
            (extensive, r#"{"VipIsp":"CMCC"}"#),
            (created_extensive, r#"{"VipIsp":"CTCC"}"#),
        ]);
        assert!(
            changed[0].contains("create-only") && changed[0].contains(r#"{"VipIsp":"CTCC"}"#),
            "{changed:?}"
        );
    }

    #[test]
    fn the_written_back_clb_id_is_read_and_a_foreign_value_is_ignored_with_a_warning() {
        assert!(warnings(&[(tencent::LOADBALANCE_ID, "lb-0a1b2c3d")]).is_empty());
        let found = warnings(&[(tencent::LOADBALANCE_ID, "my-clb")]);
        assert!(
            found.len() == 1 && found[0].contains(tencent::LOADBALANCE_ID),
            "{found:?}"
        );
    }
}

//! `metav1.Condition` lists as kube-apiserver validates them (`ValidateConditions` in
//! apimachinery's `pkg/apis/meta/v1/validation`): unique types that are qualified names,
//! `status` True, False or Unknown, a non-negative `observedGeneration`, a set
//! `lastTransitionTime`, a `reason` that is a CamelCase-like identifier of at most 1,024 bytes,
//! and a `message` of at most 32,768 bytes. A controller that writes a malformed condition
//! learns it here, as it would from a real cluster, instead of breaking every typed client
//! that later reads the object.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::meta;
use crate::status::Cause;

/// Longest `reason`, in bytes.
pub const MAX_REASON_BYTES: usize = 1024;

/// Longest `message`, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 32 * 1024;

/// kube-apiserver's explanation of the reason format.
const REASON_DETAIL: &str = "a condition reason must start with alphabetic character, optionally \
    followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric \
    character or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or \
    'ReasonA:ReasonB', regex used for validation is '[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')";

/// Go's zero `metav1.Time`, which is what an unset `lastTransitionTime` decodes to.
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Every problem of the condition list at `path` (e.g. `status.conditions`); empty when it is
/// absent or valid. The field types were checked on decoding (see `http::schema`).
pub fn validate_conditions(conditions: Option<&Value>, path: &str) -> Vec<Cause> {
    let Some(Value::Array(items)) = conditions else {
        return Vec::new();
    };
    let mut causes = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, condition) in items.iter().enumerate() {
        let at = |field: &str| format!("{path}[{i}].{field}");
        let text = |field: &str| condition.get(field).and_then(Value::as_str).unwrap_or("");
        let kind = text("type");
        if !seen.insert(kind) {
            causes.push(Cause::duplicate(at("type"), kind));
        }
        if !meta::is_qualified_name(kind) {
            causes.push(Cause::invalid(
                at("type"),
                kind,
                meta::QUALIFIED_NAME_DETAIL,
            ));
        }
        let status = text("status");
        if !matches!(status, "True" | "False" | "Unknown") {
            causes.push(Cause::not_supported(
                at("status"),
                status,
                &["False", "True", "Unknown"],
            ));
        }
        if let Some(generation) = condition.get("observedGeneration").and_then(Value::as_i64)
            && generation < 0
        {
            causes.push(Cause::invalid_literal(
                at("observedGeneration"),
                &generation.to_string(),
                "must be greater than or equal to zero",
            ));
        }
        let time = text("lastTransitionTime");
        if time.is_empty() || time == ZERO_TIME {
            causes.push(Cause {
                reason: "FieldValueRequired",
                message: "Required value: must be set".to_string(),
                field: at("lastTransitionTime"),
            });
        }
        let reason = text("reason");
        if reason.is_empty() {
            causes.push(Cause {
                reason: "FieldValueRequired",
                message: "Required value: must be set".to_string(),
                field: at("reason"),
            });
        } else {
            if !is_condition_reason(reason) {
                causes.push(Cause::invalid(at("reason"), reason, REASON_DETAIL));
            }
            if reason.len() > MAX_REASON_BYTES {
                causes.push(Cause::too_long(at("reason"), MAX_REASON_BYTES));
            }
        }
        if text("message").len() > MAX_MESSAGE_BYTES {
            causes.push(Cause::too_long(at("message"), MAX_MESSAGE_BYTES));
        }
    }
    causes
}

/// `[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?`
fn is_condition_reason(reason: &str) -> bool {
    let bytes = reason.as_bytes();
    let inner = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b',' | b':');
    bytes.first().is_some_and(u8::is_ascii_alphabetic)
        && bytes
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        && bytes.iter().all(inner)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn condition(kind: &str, status: &str, reason: &str, message: &str) -> Value {
        json!({
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        })
    }

    /// Each rule of `ValidateConditions`, with the field it names and the cause reason.
    #[test]
    fn conditions_are_validated_like_kube_apiserver() {
        let ok = condition(
            "kube-lb.io/LoadBalancerReady",
            "True",
            "Provisioned",
            "ready",
        );
        let long_message = "é".repeat(MAX_MESSAGE_BYTES / 2 + 1);
        let exact_message = "x".repeat(MAX_MESSAGE_BYTES);
        let mut negative = ok.clone();
        negative["observedGeneration"] = json!(-1);
        let mut zero_time = ok.clone();
        zero_time["lastTransitionTime"] = json!(ZERO_TIME);
        let mut generation = ok.clone();
        generation["observedGeneration"] = json!(4);
        // (case, conditions, expected (field, cause reason) pairs)
        type Case<'a> = (&'a str, Vec<Value>, Vec<(&'a str, &'a str)>);
        let cases: Vec<Case<'_>> = vec![
            ("valid", vec![ok.clone()], vec![]),
            (
                "plain type and reason lists",
                vec![condition("Ready", "Unknown", "A,B:c_", "")],
                vec![],
            ),
            ("observedGeneration", vec![generation], vec![]),
            (
                "message at the limit",
                vec![condition("Ready", "False", "X", &exact_message)],
                vec![],
            ),
            (
                "type not a qualified name",
                vec![condition("a/b/c", "True", "X", "")],
                vec![("status.conditions[0].type", "FieldValueInvalid")],
            ),
            (
                "empty type",
                vec![condition("", "True", "X", "")],
                vec![("status.conditions[0].type", "FieldValueInvalid")],
            ),
            (
                "status",
                vec![condition("Ready", "true", "X", "")],
                vec![("status.conditions[0].status", "FieldValueNotSupported")],
            ),
            (
                "reason pattern",
                vec![condition("Ready", "True", "bad reason!", "")],
                vec![("status.conditions[0].reason", "FieldValueInvalid")],
            ),
            (
                "reason ends badly",
                vec![condition("Ready", "True", "Reason:", "")],
                vec![("status.conditions[0].reason", "FieldValueInvalid")],
            ),
            (
                "empty reason",
                vec![condition("Ready", "True", "", "")],
                vec![("status.conditions[0].reason", "FieldValueRequired")],
            ),
            (
                "long reason",
                vec![condition("Ready", "True", &"R".repeat(1025), "")],
                vec![("status.conditions[0].reason", "FieldValueTooLong")],
            ),
            (
                "long message (bytes, not characters)",
                vec![condition("Ready", "True", "X", &long_message)],
                vec![("status.conditions[0].message", "FieldValueTooLong")],
            ),
            (
                "negative observedGeneration",
                vec![negative],
                vec![(
                    "status.conditions[0].observedGeneration",
                    "FieldValueInvalid",
                )],
            ),
            (
                "zero lastTransitionTime",
                vec![zero_time],
                vec![(
                    "status.conditions[0].lastTransitionTime",
                    "FieldValueRequired",
                )],
            ),
            (
                "duplicate type",
                vec![ok.clone(), ok.clone()],
                vec![("status.conditions[1].type", "FieldValueDuplicate")],
            ),
        ];
        for (case, list, want) in cases {
            let causes = validate_conditions(Some(&json!(list)), "status.conditions");
            let got: Vec<(&str, &str)> = causes
                .iter()
                .map(|c| (c.field.as_str(), c.reason))
                .collect();
            assert_eq!(got, want, "{case}: {causes:?}");
        }
        assert!(validate_conditions(None, "status.conditions").is_empty());
    }
}

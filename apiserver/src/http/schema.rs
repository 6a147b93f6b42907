//! Type checks of request bodies against the Go types kube-apiserver decodes them into.
//!
//! The store keeps untyped JSON, so without this a Service with `port: "80"` or a Lease with
//! `renewTime: 5` would be stored and then break every typed client that lists it (kube-rs
//! fails the whole list or watch event). kube-apiserver refuses such a body with 400
//! `BadRequest` ("… cannot be handled as a Service: … spec.ports.port of type int32"); here the
//! message and a cause name the exact field path. Only the fields of the kinds kube-lb reads and
//! writes (Service, EndpointSlice, Node, Lease, ValidatingWebhookConfiguration, and `metadata`
//! of every kind) are typed here; fields a kind does not have are the field validation's
//! (`field_validation`), and `null` means "unset" as in Go.
//!
//! A stored object must also decode in typed clients, which are stricter than Go about `null`
//! and absent fields: a `null` list item or map value becomes the element's zero value (`{}`,
//! `""`, `0`, `false`), as Go's decoder makes it, and a field that k8s-openapi requires (marked
//! `!` below; kube-apiserver's validation requires the same ones) must be present, or the
//! request is a 422 naming it.

use base64::Engine as _;
use serde_json::Value;

use crate::resources::ResourceDef;
use crate::status::{ApiError, Cause};

/// The deepest nesting accepted in a stored object. JSON decoding already stops at 128; this
/// also bounds what a JSON patch may build, so no later recursion over the object can exhaust
/// a thread's stack.
pub const MAX_DEPTH: usize = 100;

/// The type a field must have.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Str,
    /// `metav1.Time`/`MicroTime`: an RFC 3339 string.
    Time,
    Int32,
    Int64,
    Bool,
    /// `intstr.IntOrString`.
    IntOrStr,
    /// `[]byte`: standard base64 text, as Go's JSON decoder reads it.
    Bytes,
    /// Not checked (quantities, free-form fields).
    Any,
    /// A struct: known fields; others pass.
    Obj(&'static [(&'static str, Shape)]),
    /// `map[string]T`.
    Map(&'static Shape),
    /// `[]T`.
    List(&'static Shape),
}

use Shape::{Any, Bool, Bytes, Int32, Int64, IntOrStr, List, Map, Obj, Str, Time};

const STRINGS: Shape = List(&Str);
const STRING_MAP: Shape = Map(&Str);

const OWNER_REFERENCE: Shape = Obj(&[
    ("!apiVersion", Str),
    ("!kind", Str),
    ("!name", Str),
    ("!uid", Str),
    ("controller", Bool),
    ("blockOwnerDeletion", Bool),
]);

const OBJECT_META: Shape = Obj(&[
    ("name", Str),
    ("generateName", Str),
    ("namespace", Str),
    ("uid", Str),
    ("resourceVersion", Str),
    ("generation", Int64),
    ("creationTimestamp", Time),
    ("deletionTimestamp", Time),
    ("deletionGracePeriodSeconds", Int64),
    ("labels", STRING_MAP),
    ("annotations", STRING_MAP),
    ("ownerReferences", List(&OWNER_REFERENCE)),
    ("finalizers", STRINGS),
    ("managedFields", List(&Any)),
]);

const CONDITION: Shape = Obj(&[
    ("!type", Str),
    ("!status", Str),
    ("observedGeneration", Int64),
    ("!lastTransitionTime", Time),
    ("!reason", Str),
    ("!message", Str),
]);

const SERVICE_PORT: Shape = Obj(&[
    ("name", Str),
    ("protocol", Str),
    ("appProtocol", Str),
    ("!port", Int32),
    ("targetPort", IntOrStr),
    ("nodePort", Int32),
]);

const SERVICE: Shape = Obj(&[
    ("apiVersion", Str),
    ("kind", Str),
    ("metadata", OBJECT_META),
    (
        "spec",
        Obj(&[
            ("ports", List(&SERVICE_PORT)),
            ("selector", STRING_MAP),
            ("clusterIP", Str),
            ("clusterIPs", STRINGS),
            ("type", Str),
            ("externalIPs", STRINGS),
            ("sessionAffinity", Str),
            ("loadBalancerIP", Str),
            ("loadBalancerSourceRanges", STRINGS),
            ("externalName", Str),
            ("externalTrafficPolicy", Str),
            ("healthCheckNodePort", Int32),
            ("publishNotReadyAddresses", Bool),
            (
                "sessionAffinityConfig",
                Obj(&[("clientIP", Obj(&[("timeoutSeconds", Int32)]))]),
            ),
            ("ipFamilies", STRINGS),
            ("ipFamilyPolicy", Str),
            ("allocateLoadBalancerNodePorts", Bool),
            ("loadBalancerClass", Str),
            ("internalTrafficPolicy", Str),
            ("trafficDistribution", Str),
            // Seed 002 (the 1.17–1.21 API); see `services`.
            ("topologyKeys", STRINGS),
        ]),
    ),
    (
        "status",
        Obj(&[
            (
                "loadBalancer",
                Obj(&[(
                    "ingress",
                    List(&Obj(&[
                        ("ip", Str),
                        ("hostname", Str),
                        ("ipMode", Str),
                        (
                            "ports",
                            List(&Obj(&[
                                ("!port", Int32),
                                ("!protocol", Str),
                                ("error", Str),
                            ])),
                        ),
                    ])),
                )]),
            ),
            ("conditions", List(&CONDITION)),
        ]),
    ),
]);

const OBJECT_REFERENCE: Shape = Obj(&[
    ("kind", Str),
    ("namespace", Str),
    ("name", Str),
    ("uid", Str),
    ("apiVersion", Str),
    ("resourceVersion", Str),
    ("fieldPath", Str),
]);

const ENDPOINT_SLICE: Shape = Obj(&[
    ("apiVersion", Str),
    ("kind", Str),
    ("metadata", OBJECT_META),
    ("!addressType", Str),
    (
        "endpoints",
        List(&Obj(&[
            ("!addresses", STRINGS),
            (
                "conditions",
                Obj(&[("ready", Bool), ("serving", Bool), ("terminating", Bool)]),
            ),
            ("hostname", Str),
            ("targetRef", OBJECT_REFERENCE),
            ("deprecatedTopology", STRING_MAP),
            ("nodeName", Str),
            ("zone", Str),
            ("hints", Any),
        ])),
    ),
    (
        "ports",
        List(&Obj(&[
            ("name", Str),
            ("protocol", Str),
            ("port", Int32),
            ("appProtocol", Str),
        ])),
    ),
]);

const NODE: Shape = Obj(&[
    ("apiVersion", Str),
    ("kind", Str),
    ("metadata", OBJECT_META),
    (
        "spec",
        Obj(&[
            ("podCIDR", Str),
            ("podCIDRs", STRINGS),
            ("providerID", Str),
            ("unschedulable", Bool),
            (
                "taints",
                List(&Obj(&[
                    ("!key", Str),
                    ("value", Str),
                    ("!effect", Str),
                    ("timeAdded", Time),
                ])),
            ),
        ]),
    ),
    (
        "status",
        Obj(&[
            ("capacity", Map(&Any)),
            ("allocatable", Map(&Any)),
            ("phase", Str),
            (
                "conditions",
                List(&Obj(&[
                    ("!type", Str),
                    ("!status", Str),
                    ("lastHeartbeatTime", Time),
                    ("lastTransitionTime", Time),
                    ("reason", Str),
                    ("message", Str),
                ])),
            ),
            (
                "addresses",
                List(&Obj(&[("!type", Str), ("!address", Str)])),
            ),
        ]),
    ),
]);

const LEASE: Shape = Obj(&[
    ("apiVersion", Str),
    ("kind", Str),
    ("metadata", OBJECT_META),
    (
        "spec",
        Obj(&[
            ("holderIdentity", Str),
            ("leaseDurationSeconds", Int32),
            ("acquireTime", Time),
            ("renewTime", Time),
            ("leaseTransitions", Int32),
            ("strategy", Str),
            ("preferredHolder", Str),
        ]),
    ),
]);

const LABEL_SELECTOR: Shape = Obj(&[
    ("matchLabels", STRING_MAP),
    (
        "matchExpressions",
        List(&Obj(&[
            ("key", Str),
            ("operator", Str),
            ("values", STRINGS),
        ])),
    ),
]);

/// admissionregistration.k8s.io/v1. The fields k8s-openapi requires (a webhook's name,
/// client config, side effects and review versions, a Service's name and namespace, a match
/// condition's name and expression) are not marked: the kind's validation requires each of
/// them, in kube-apiserver's words, so none is ever stored without them.
const VALIDATING_WEBHOOK_CONFIGURATION: Shape = Obj(&[
    ("apiVersion", Str),
    ("kind", Str),
    ("metadata", OBJECT_META),
    (
        "webhooks",
        List(&Obj(&[
            ("name", Str),
            (
                "clientConfig",
                Obj(&[
                    ("url", Str),
                    (
                        "service",
                        Obj(&[
                            ("namespace", Str),
                            ("name", Str),
                            ("path", Str),
                            ("port", Int32),
                        ]),
                    ),
                    ("caBundle", Bytes),
                ]),
            ),
            (
                "rules",
                List(&Obj(&[
                    ("operations", STRINGS),
                    ("apiGroups", STRINGS),
                    ("apiVersions", STRINGS),
                    ("resources", STRINGS),
                    ("scope", Str),
                ])),
            ),
            ("failurePolicy", Str),
            ("matchPolicy", Str),
            ("namespaceSelector", LABEL_SELECTOR),
            ("objectSelector", LABEL_SELECTOR),
            ("sideEffects", Str),
            ("timeoutSeconds", Int32),
            ("admissionReviewVersions", STRINGS),
            (
                "matchConditions",
                List(&Obj(&[("name", Str), ("expression", Str)])),
            ),
        ])),
    ),
]);

/// Any other kind: only its metadata is typed.
const OTHER: Shape = Obj(&[
    ("apiVersion", Str),
    ("kind", Str),
    ("metadata", OBJECT_META),
]);

fn shape_of(def: &ResourceDef) -> Shape {
    match (def.group, def.kind) {
        ("", "Service") => SERVICE,
        ("discovery.k8s.io", "EndpointSlice") => ENDPOINT_SLICE,
        ("", "Node") => NODE,
        ("coordination.k8s.io", "Lease") => LEASE,
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            VALIDATING_WEBHOOK_CONFIGURATION
        }
        _ => OTHER,
    }
}

/// What is wrong with a body.
#[derive(Debug)]
enum Problem {
    /// A value of the wrong type (400, as a decode failure in kube-apiserver).
    Mismatch {
        path: String,
        expected: &'static str,
        found: String,
    },
    /// A field typed clients require is absent (422 `FieldValueRequired`).
    Required(String),
}

/// Whether the body is a whole object or a partial one (an apply configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Types, required fields, `null` items normalised.
    Full,
    /// Types only; `null` kept (it means "remove" in a patch).
    Partial,
}

/// Checks a whole object against the Go type of `def`'s kind and normalises `null` list items
/// and map values; a wrong type is a 400 and a missing required field a 422, each naming the
/// field path.
pub fn check(def: &ResourceDef, object: &mut Value) -> Result<(), ApiError> {
    let mut path = String::new();
    let result = walk(shape_of(def), object, &mut path, 0, Mode::Full);
    result.map_err(|problem| to_error(def, object, problem))
}

/// Type-checks a partial object (an apply configuration) without changing it.
pub fn check_partial(def: &ResourceDef, object: &Value) -> Result<(), ApiError> {
    let mut copy = object.clone();
    let mut path = String::new();
    walk(shape_of(def), &mut copy, &mut path, 0, Mode::Partial)
        .map_err(|problem| to_error(def, object, problem))
}

fn to_error(def: &ResourceDef, object: &Value, problem: Problem) -> ApiError {
    match problem {
        Problem::Required(path) => {
            let name = crate::meta::name(object).unwrap_or_default().to_owned();
            ApiError::invalid(def, &name, vec![Cause::required(path)])
        }
        Problem::Mismatch {
            path,
            expected,
            found,
        } => {
            let message = format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: {path}: expected {expected}, got {found}",
                kind = def.kind,
                version = def.version,
            );
            let mut error = ApiError::bad_request(message);
            error.details.kind = Some(def.kind.to_string());
            error.details.group = Some(def.group.to_string());
            error.details.causes.push(Cause {
                reason: "FieldValueInvalid",
                message: format!("expected {expected}, got {found}"),
                field: path,
            });
            error
        }
    }
}

fn describe(value: &Value) -> String {
    const MAX: usize = 64;
    let text = match value {
        Value::Object(_) => return "an object".to_owned(),
        Value::Array(_) => return "a list".to_owned(),
        Value::String(s) => format!("string {s:?}"),
        other => format!("{} {other}", kind_of(other)),
    };
    if text.len() <= MAX {
        return text;
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

fn mismatch(path: &str, expected: &'static str, value: &Value) -> Problem {
    Problem::Mismatch {
        path: if path.is_empty() {
            "<root>".to_owned()
        } else {
            path.to_owned()
        },
        expected,
        found: describe(value),
    }
}

/// What Go's `time.Parse(time.RFC3339, …)` takes (and typed clients such as kube-rs read back):
/// `T` between date and time, any fraction of a second, and `Z` or a numeric offset — never a
/// time without its zone.
fn is_rfc3339(text: &str) -> bool {
    if text.ends_with('Z') {
        return humantime::parse_rfc3339(text).is_ok();
    }
    // `…+02:00` / `…-05:30`: check the time part with `Z`, then the offset's shape.
    let Some(split) = text.len().checked_sub(6) else {
        return false;
    };
    let (time, offset) = (text.get(..split), text.get(split..));
    match (time, offset) {
        (Some(time), Some(offset)) => {
            let b = offset.as_bytes();
            (b[0] == b'+' || b[0] == b'-')
                && b[1].is_ascii_digit()
                && b[2].is_ascii_digit()
                && b[3] == b':'
                && b[4].is_ascii_digit()
                && b[5].is_ascii_digit()
                && humantime::parse_rfc3339(&format!("{time}Z")).is_ok()
        }
        _ => false,
    }
}

fn too_deep(path: &str) -> Problem {
    Problem::Mismatch {
        path: path.to_owned(),
        expected: "at most 100 levels of nesting",
        found: "deeper nesting".to_owned(),
    }
}

/// The value Go's decoder leaves for a `null` element of this shape.
fn zero(shape: Shape) -> Value {
    match shape {
        Str | Time | IntOrStr | Bytes => Value::String(String::new()),
        Int32 | Int64 => Value::from(0),
        Bool => Value::Bool(false),
        Any | Obj(_) | Map(_) => Value::Object(serde_json::Map::new()),
        List(_) => Value::Array(Vec::new()),
    }
}

fn walk(
    shape: Shape,
    value: &mut Value,
    path: &mut String,
    depth: usize,
    mode: Mode,
) -> Result<(), Problem> {
    if depth > MAX_DEPTH {
        return Err(too_deep(path));
    }
    if value.is_null() {
        return Ok(());
    }
    match shape {
        Str if value.is_string() => Ok(()),
        Str => Err(mismatch(path, "a string", value)),
        Time => match value.as_str() {
            Some(text) if is_rfc3339(text) => Ok(()),
            _ => Err(mismatch(path, "an RFC 3339 time string", value)),
        },
        Int32 => match value.as_i64() {
            Some(n) if i32::try_from(n).is_ok() => Ok(()),
            _ => Err(mismatch(path, "a 32-bit integer", value)),
        },
        Int64 => match value.as_i64() {
            Some(_) => Ok(()),
            None => Err(mismatch(path, "a 64-bit integer", value)),
        },
        Bool if value.is_boolean() => Ok(()),
        Bool => Err(mismatch(path, "a boolean", value)),
        IntOrStr => match value {
            Value::String(_) => Ok(()),
            Value::Number(n) if n.as_i64().is_some_and(|n| i32::try_from(n).is_ok()) => Ok(()),
            _ => Err(mismatch(
                path,
                "a 32-bit integer or a string (IntOrString)",
                value,
            )),
        },
        Bytes => match value.as_str() {
            Some(text)
                if base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .is_ok() =>
            {
                Ok(())
            }
            _ => Err(mismatch(path, "base64-encoded bytes", value)),
        },
        Any => within_depth(value, path, depth),
        Obj(fields) => {
            let Value::Object(map) = value else {
                return Err(mismatch(path, "an object", value));
            };
            for (key, child) in map.iter_mut() {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                let known = fields
                    .iter()
                    .find(|(name, _)| name.trim_start_matches('!') == key);
                match known {
                    Some((_, shape)) => walk(*shape, child, path, depth + 1, mode)?,
                    None => within_depth(child, path, depth + 1)?,
                }
                path.truncate(len);
            }
            if mode == Mode::Full {
                for (name, _) in fields.iter() {
                    let Some(name) = name.strip_prefix('!') else {
                        continue;
                    };
                    if map.get(name).is_none_or(Value::is_null) {
                        let field = if path.is_empty() {
                            name.to_owned()
                        } else {
                            format!("{path}.{name}")
                        };
                        return Err(Problem::Required(field));
                    }
                }
            }
            Ok(())
        }
        Map(item) => {
            let Value::Object(map) = value else {
                return Err(mismatch(path, "an object (a map)", value));
            };
            for (key, child) in map.iter_mut() {
                let len = path.len();
                path.push('[');
                path.push_str(key);
                path.push(']');
                if child.is_null() && mode == Mode::Full {
                    *child = zero(*item);
                }
                walk(*item, child, path, depth + 1, mode)?;
                path.truncate(len);
            }
            Ok(())
        }
        List(item) => {
            let Value::Array(items) = value else {
                return Err(mismatch(path, "a list", value));
            };
            for (i, child) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                if child.is_null() && mode == Mode::Full {
                    *child = zero(*item);
                }
                walk(*item, child, path, depth + 1, mode)?;
                path.truncate(len);
            }
            Ok(())
        }
    }
}

/// Unchecked parts still count toward [`MAX_DEPTH`].
fn within_depth(value: &Value, path: &mut String, depth: usize) -> Result<(), Problem> {
    if depth > MAX_DEPTH {
        return Err(too_deep(path));
    }
    match value {
        Value::Array(items) => items
            .iter()
            .try_for_each(|v| within_depth(v, path, depth + 1)),
        Value::Object(map) => map
            .values()
            .try_for_each(|v| within_depth(v, path, depth + 1)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::resources;

    /// Times as Go's RFC 3339 parser takes them: a zone is required (a fuzzed Lease with
    /// `renewTime: 2024-01-01T00:00:00.0` was stored, and kube-rs could not read it back).
    #[test]
    fn times_need_a_t_and_a_zone() {
        for (text, ok) in [
            ("2024-01-01T00:00:00Z", true),
            ("2024-01-01T00:00:00.123456Z", true),
            ("2024-01-01T00:00:00.1Z", true),
            ("2024-01-01T02:00:00+02:00", true),
            ("2024-01-01T02:00:00.5-05:30", true),
            ("2024-01-01T00:00:00.0", false),
            ("2024-01-01T00:00:00", false),
            ("2024-01-01 00:00:00Z", false),
            ("2024-01-01T00:00:00+0200", false),
            ("2024-13-01T00:00:00Z", false),
            ("", false),
        ] {
            assert_eq!(is_rfc3339(text), ok, "{text:?}");
        }
    }

    fn def(kind: &str) -> &'static ResourceDef {
        let id = match kind {
            "Service" => resources::find("", "v1", "services"),
            "Lease" => resources::find("coordination.k8s.io", "v1", "leases"),
            "EndpointSlice" => resources::find("discovery.k8s.io", "v1", "endpointslices"),
            "Node" => resources::find("", "v1", "nodes"),
            "ValidatingWebhookConfiguration" => {
                Some(resources::validating_webhook_configurations())
            }
            _ => None,
        };
        resources::get(id.unwrap())
    }

    #[test]
    fn wrong_types_are_named_by_field_path() {
        let cases = [
            (
                "Service",
                json!({"spec": {"ports": [{"port": 80}, {"port": "80"}]}}),
                Some("spec.ports[1].port"),
            ),
            (
                "Service",
                json!({"spec": {"ports": [{"port": 4294967296u64}]}}),
                Some("spec.ports[0].port"),
            ),
            (
                "Service",
                json!({"metadata": {"labels": {"a": 1}}}),
                Some("metadata.labels[a]"),
            ),
            ("Service", json!({"spec": {"selector": null}}), None),
            (
                "Service",
                json!({"spec": {"ports": [{"targetPort": "http"}]}}),
                None,
            ),
            (
                "Service",
                json!({"spec": {"unknownField": {"x": [1]}}}),
                None,
            ),
            (
                "Lease",
                json!({"spec": {"renewTime": "yesterday"}}),
                Some("spec.renewTime"),
            ),
            (
                "Lease",
                json!({"spec": {"renewTime": "2024-01-01T00:00:00.000000Z", "acquireTime": "2024-01-01T00:00:00+02:00"}}),
                None,
            ),
            (
                "EndpointSlice",
                json!({"endpoints": [{"conditions": {"ready": "true"}}]}),
                Some("endpoints[0].conditions.ready"),
            ),
            (
                "Node",
                json!({"status": {"addresses": {"type": "InternalIP"}}}),
                Some("status.addresses"),
            ),
            (
                "ValidatingWebhookConfiguration",
                json!({"webhooks": [{"timeoutSeconds": "10"}]}),
                Some("webhooks[0].timeoutSeconds"),
            ),
            (
                "ValidatingWebhookConfiguration",
                json!({"webhooks": [{"clientConfig": {"caBundle": "not base64!"}}]}),
                Some("webhooks[0].clientConfig.caBundle"),
            ),
            (
                "ValidatingWebhookConfiguration",
                json!({"webhooks": [{"rules": [{"operations": "CREATE"}]}]}),
                Some("webhooks[0].rules[0].operations"),
            ),
            (
                "ValidatingWebhookConfiguration",
                json!({"webhooks": [{"namespaceSelector": {"matchLabels": {"a": 1}}}]}),
                Some("webhooks[0].namespaceSelector.matchLabels[a]"),
            ),
            (
                "ValidatingWebhookConfiguration",
                json!({"webhooks": [{"name": "a.b.c", "clientConfig": {"caBundle": "Zm9vCg==", "service": {"port": 443}}, "sideEffects": "None"}]}),
                None,
            ),
        ];
        for (kind, object, field) in cases {
            let result = check_partial(def(kind), &object);
            match field {
                None => assert!(result.is_ok(), "{kind} {object}: {result:?}"),
                Some(field) => {
                    let error = result.expect_err(&object.to_string());
                    assert_eq!(error.code, 400);
                    assert!(error.message.contains(field), "{}", error.message);
                    assert_eq!(error.details.causes[0].field, field);
                }
            }
        }
    }

    #[test]
    fn nulls_become_zero_values_and_required_fields_are_named() {
        let mut slice = json!({
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1", null]}, null],
            "metadata": {"labels": {"a": null}},
        });
        let error = check(def("EndpointSlice"), &mut slice).unwrap_err();
        assert_eq!(error.code, 422);
        assert_eq!(error.details.causes[0].field, "endpoints[1].addresses");
        assert_eq!(slice["endpoints"][0]["addresses"][1], "");
        assert_eq!(slice["endpoints"][1], json!({}));
        let mut labelled = json!({"metadata": {"labels": {"a": null}}});
        assert!(check(def("Service"), &mut labelled).is_ok());
        assert_eq!(labelled["metadata"]["labels"]["a"], "");

        let mut lease = json!({"spec": {"holderIdentity": null, "renewTime": null}});
        assert!(check(def("Lease"), &mut lease).is_ok());
        let error = check(def("EndpointSlice"), &mut json!({"endpoints": []})).unwrap_err();
        assert_eq!(error.details.causes[0].field, "addressType");
    }

    #[test]
    fn nesting_is_bounded_also_in_unknown_fields() {
        let mut deep = json!(1);
        for _ in 0..(MAX_DEPTH + 5) {
            deep = json!([deep]);
        }
        let error = check(def("Service"), &mut json!({"spec": {"x": deep}})).unwrap_err();
        assert!(error.message.contains("spec.x"), "{}", error.message);
    }
}

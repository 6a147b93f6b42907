//! The fields a built-in kind's Go type has, for kube-apiserver's field validation: Go's decoder
//! drops a field its struct does not have, and with `fieldValidation=Strict` (kubectl's default
//! since 1.27) the request fails naming it. The same generated schema that decodes protobuf
//! bodies knows every struct's JSON names, inlined structs included.

use serde_json::Value;

use super::{Card, Message, Ty, schema};

/// Fields this server knows beyond the Go types it was generated from: the seeds' Service
/// Topology document writes `spec.topologyKeys` (alpha in Kubernetes 1.17–1.21), which the
/// dataplane honours, so a Service written as the seed shows keeps it.
const EXTRA: &[(&str, &str)] = &[("core.v1.ServiceSpec", "topologyKeys")];

/// Nesting deeper than this is not looked into (the schema's own types are far shallower).
const MAX_DEPTH: usize = 64;

/// The fields of `object` that the Go type of `api_version`/`kind` does not have, as the strict
/// decoder names them (`spec.ports[0].nme`), removed from `object` as Go's decoder drops them.
/// `None` for a kind this schema does not describe (custom resources, which their own schema
/// prunes).
pub fn unknown_fields(api_version: &str, kind: &str, object: &mut Value) -> Option<Vec<String>> {
    let message = schema::KINDS
        .iter()
        .find(|(v, k, _)| *v == api_version && *k == kind)
        .map(|(_, _, message)| *message)?;
    let mut found = Vec::new();
    walk_struct(message, object, "", true, &mut found, 0);
    Some(found)
}

/// Whether `message` (or a struct inlined in it) has a field called `name`.
fn has_field(message: &Message, name: &str) -> bool {
    field_type(message, name).is_some() || EXTRA.contains(&(message.name, name))
}

/// The field called `name`, looking into inlined structs.
fn field_type(message: &Message, name: &str) -> Option<(&'static Ty, Card)> {
    message
        .fields
        .iter()
        .find_map(|field| match (field.inline, &field.ty) {
            (true, Ty::Message(inner)) => field_type(inner, name),
            _ if field.json == name => Some((&field.ty, field.card)),
            _ => None,
        })
}

fn walk_struct(
    message: &Message,
    value: &mut Value,
    path: &str,
    top_level: bool,
    found: &mut Vec<String>,
    depth: usize,
) {
    let Some(map) = value.as_object_mut() else {
        // Not an object: a type error, which the type check reports.
        return;
    };
    if depth > MAX_DEPTH {
        return;
    }
    let join = |name: &str| {
        if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        }
    };
    // In the body's order, depth first, as the decoder meets them.
    let mut unknown = Vec::new();
    for (key, child) in map.iter_mut() {
        let type_meta = top_level && matches!(key.as_str(), "apiVersion" | "kind");
        if !type_meta && !has_field(message, key) {
            found.push(join(key));
            unknown.push(key.clone());
            continue;
        }
        let Some((Ty::Message(inner), card)) = field_type(message, key) else {
            continue;
        };
        let child_path = join(key);
        match (card, child) {
            (Card::One, child) => walk_struct(inner, child, &child_path, false, found, depth + 1),
            (Card::Repeated, Value::Array(items)) => {
                for (index, item) in items.iter_mut().enumerate() {
                    let item_path = format!("{child_path}[{index}]");
                    walk_struct(inner, item, &item_path, false, found, depth + 1);
                }
            }
            (Card::Map, Value::Object(entries)) => {
                for (entry_key, item) in entries.iter_mut() {
                    let item_path = format!("{child_path}.{entry_key}");
                    walk_struct(inner, item, &item_path, false, found, depth + 1);
                }
            }
            _ => {}
        }
    }
    for key in unknown {
        map.remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn unknown_fields_are_named_by_path_and_dropped() {
        let mut service = json!({
            "apiVersion": "v1", "kind": "Service", "bogus": 1,
            "metadata": {"name": "web", "labelz": {"a": "b"}, "labels": {"any-key": "x"}},
            "spec": {
                "type": "LoadBalancer",
                "selektor": {"app": "web"},
                "topologyKeys": ["kubernetes.io/hostname", "*"],
                "ports": [{"port": 80, "nme": "http"}, {"port": 81}],
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 5, "timeout": 1}},
            },
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP", "x": 1}]}},
        });
        let found = unknown_fields("v1", "Service", &mut service).unwrap();
        assert_eq!(
            found,
            [
                "bogus",
                "metadata.labelz",
                "spec.ports[0].nme",
                "spec.selektor",
                "spec.sessionAffinityConfig.clientIP.timeout",
                "status.loadBalancer.ingress[0].x",
            ]
        );
        assert_eq!(
            service,
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "labels": {"any-key": "x"}},
                "spec": {
                    "type": "LoadBalancer",
                    "topologyKeys": ["kubernetes.io/hostname", "*"],
                    "ports": [{"port": 80}, {"port": 81}],
                    "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 5}},
                },
                "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP"}]}},
            })
        );
    }

    #[test]
    fn inlined_structs_and_free_form_fields_are_known() {
        // A Pod's probe handler and volume source are inlined Go structs; managedFields'
        // fieldsV1 is free-form JSON.
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]},
            "spec": {
                "containers": [{"name": "c", "readinessProbe": {"httpGet": {"port": 80}, "periodSeconds": 1}}],
                "volumes": [{"name": "v", "emptyDir": {}}],
            },
        });
        assert_eq!(
            unknown_fields("v1", "Pod", &mut pod).unwrap(),
            Vec::<String>::new()
        );
        // A kind without a Go type here is not looked at.
        let mut custom = json!({"apiVersion": "example.com/v1", "kind": "Widget", "x": 1});
        assert_eq!(
            unknown_fields("example.com/v1", "Widget", &mut custom),
            None
        );
        assert_eq!(custom["x"], 1);
    }
}

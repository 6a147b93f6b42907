//! kube-apiserver's field validation (`fieldValidation=Ignore|Warn|Strict`, Warn when not
//! sent): fields a built-in kind's Go type does not have are dropped, reported as `Warning`
//! headers, or refuse the request, in the words and status codes kube-apiserver uses for
//! creates and updates (400 from the strict decoder), patches (422 on `patch`) and server-side
//! apply (which always needs every field declared, whatever the directive).

use axum::http::HeaderValue;
use axum::response::Response;
use serde_json::Value;

use super::{proto, schema};
use crate::resources::Entry;
use crate::status::{ApiError, Cause};

/// What to do with unknown fields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Directive {
    /// Drop them silently.
    Ignore,
    /// Drop them, with a warning each (kube-apiserver's default).
    #[default]
    Warn,
    /// Refuse the request.
    Strict,
}

impl Directive {
    /// The directive a `fieldValidation` value asks for (`""` is the default); `None` for a
    /// value kube-apiserver does not support.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "" | "Warn" => Some(Self::Warn),
            "Ignore" => Some(Self::Ignore),
            "Strict" => Some(Self::Strict),
            _ => None,
        }
    }
}

/// The cause `ValidateFieldValidation` gives for an unsupported value.
pub fn unsupported(value: &str) -> Cause {
    Cause::not_supported("fieldValidation", value, &["", "Ignore", "Strict", "Warn"])
}

/// The strict decoder's error text for `unknown` fields.
fn strict_text(unknown: &[String]) -> String {
    let fields: Vec<String> = unknown
        .iter()
        .map(|path| format!("unknown field \"{path}\""))
        .collect();
    format!("strict decoding error: {}", fields.join(", "))
}

fn warnings(directive: Directive, unknown: Vec<String>) -> Vec<String> {
    match directive {
        Directive::Warn => unknown
            .into_iter()
            .map(|path| format!("unknown field \"{path}\""))
            .collect(),
        Directive::Ignore | Directive::Strict => Vec::new(),
    }
}

/// A create's or update's body: typed ([`schema::check`]) and without unknown fields. A wrong
/// type is reported first (the decoder fails on it before strictness counts), then a Strict
/// refusal (400 `… cannot be handled as a …: strict decoding error: …`), then what the type
/// check requires. Returns the warnings to send.
pub fn check_body(
    entry: &Entry,
    object: &mut Value,
    directive: Directive,
) -> Result<Vec<String>, ApiError> {
    let def = &entry.def;
    let unknown = unknown_fields(entry, object);
    let typed = schema::check(def, object);
    match typed {
        Err(error) if error.code == 400 => return Err(error),
        _ if directive == Directive::Strict && !unknown.is_empty() => {
            return Err(ApiError::bad_request(format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: {}",
                strict_text(&unknown),
                kind = def.kind,
                version = def.version,
            )));
        }
        Err(error) => return Err(error),
        Ok(()) => {}
    }
    Ok(warnings(directive, unknown))
}

/// A patch's result: typed and without unknown fields. Strict refuses it as kube-apiserver's
/// patch handler does: a 422 on `patch` whose value `shown` renders from the patched object as
/// it was before its unknown fields were dropped.
pub fn check_patched(
    entry: &Entry,
    patched: &mut Value,
    directive: Directive,
    shown: impl FnOnce(&Value) -> String,
) -> Result<Vec<String>, ApiError> {
    let before = (directive == Directive::Strict).then(|| patched.clone());
    let unknown = unknown_fields(entry, patched);
    schema::check(&entry.def, patched)?;
    if let Some(before) = before.filter(|_| !unknown.is_empty()) {
        return Err(ApiError::invalid_patch(
            &shown(&before),
            &strict_text(&unknown),
        ));
    }
    Ok(warnings(directive, unknown))
}

/// Removes the fields of `object` its kind does not have and names them: a built-in kind's Go
/// type decides, and a custom resource's structural schema (its pruning).
fn unknown_fields(entry: &Entry, object: &mut Value) -> Vec<String> {
    match entry.custom.as_ref().and_then(|c| c.schema.as_ref()) {
        Some(schema) => crate::crd::schema::pruned_fields(object, schema),
        None => proto::unknown_fields(&entry.def.api_version(), entry.def.kind, object)
            .unwrap_or_default(),
    }
}

/// A server-side apply configuration: every field must be declared in the kind's schema
/// (structured-merge-diff's typed conversion), whatever the directive; kube-apiserver answers a
/// plain 500 `failed to create typed patch object`.
pub fn check_apply(entry: &Entry, configuration: &Value) -> Result<(), ApiError> {
    let def = &entry.def;
    let mut copy = configuration.clone();
    let unknown = unknown_fields(entry, &mut copy);
    if unknown.is_empty() {
        return Ok(());
    }
    let errors: Vec<String> = unknown
        .iter()
        .map(|path| format!(".{path}: field not declared in schema"))
        .collect();
    let text = match errors.as_slice() {
        [one] => one.clone(),
        many => format!("errors:\n  {}", many.join("\n  ")),
    };
    // The configuration's own namespace and name, as upstream's objectGVKNN prints them.
    let meta = |field: &str| {
        configuration
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    Err(ApiError::unknown(format!(
        "failed to create typed patch object ({}/{}; {}/{}, Kind={}): {text}",
        meta("namespace"),
        meta("name"),
        def.group,
        def.version,
        def.kind
    )))
}

/// Go's `%+v` of a decoded JSON value (a strategic merge patch is shown so in its 422):
/// `map[spec:map[ports:[map[port:80]]]]`, keys sorted.
pub fn go_value_text(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_string(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => number.to_string(),
        Value::String(text) => text.clone(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_value_text).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let entries: Vec<String> = entries
                .into_iter()
                .map(|(key, value)| format!("{key}:{}", go_value_text(value)))
                .collect();
            format!("map[{}]", entries.join(" "))
        }
    }
}

/// `response` with one `Warning` header per warning, as kube-apiserver writes them
/// (`299 - "text"`); kubectl prints each as `Warning: text`.
pub fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let quoted = serde_json::to_string(warning).unwrap_or_default();
        if let Ok(value) = HeaderValue::from_str(&format!("299 - {quoted}")) {
            response.headers_mut().append("warning", value);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::resources;

    fn service_entry() -> Entry {
        crate::resources::Registry::builtin()
            .entry(resources::services())
            .cloned()
            .unwrap()
    }

    fn service(extra: Value) -> Value {
        let mut object = json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"ports": [{"port": 80}]},
        });
        if let (Some(target), Some(extra)) = (object["spec"].as_object_mut(), extra.as_object()) {
            target.extend(extra.clone());
        }
        object
    }

    #[test]
    fn directives_decide_between_dropping_warning_and_refusing() {
        let cases = [
            (Directive::Ignore, Ok(vec![])),
            (
                Directive::Warn,
                Ok(vec!["unknown field \"spec.selektor\"".to_string()]),
            ),
            (
                Directive::Strict,
                Err(
                    "Service in version \"v1\" cannot be handled as a Service: strict decoding \
                     error: unknown field \"spec.selektor\""
                        .to_string(),
                ),
            ),
        ];
        for (directive, expected) in cases {
            let mut object = service(json!({"selektor": {"app": "web"}}));
            let got = check_body(&service_entry(), &mut object, directive).map_err(|e| {
                assert_eq!((e.code, e.reason), (400, "BadRequest"));
                e.message
            });
            assert_eq!(got, expected, "{directive:?}");
            if directive != Directive::Strict {
                assert!(object["spec"].get("selektor").is_none(), "{object}");
            }
        }
    }

    #[test]
    fn a_wrong_type_is_reported_before_strictness() {
        let mut object = service(json!({"selektor": {}, "ports": [{"port": "eighty"}]}));
        let error = check_body(&service_entry(), &mut object, Directive::Strict).unwrap_err();
        assert!(error.message.contains("spec.ports"), "{}", error.message);
        assert!(!error.message.contains("strict"), "{}", error.message);
    }

    #[test]
    fn apply_needs_every_field_declared() {
        let one = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "team"}, "spec": {"selektor": {}},
        });
        let error = check_apply(&service_entry(), &one).unwrap_err();
        assert_eq!((error.code, error.reason), (500, ""));
        assert_eq!(
            error.message,
            "failed to create typed patch object (team/web; /v1, Kind=Service): .spec.selektor: \
             field not declared in schema"
        );
        let two = json!({"apiVersion": "v1", "kind": "Service", "a": 1, "spec": {"b": 2}});
        assert_eq!(
            check_apply(&service_entry(), &two).unwrap_err().message,
            "failed to create typed patch object (/; /v1, Kind=Service): errors:\n  .a: field not \
             declared in schema\n  .spec.b: field not declared in schema"
        );
        assert!(check_apply(&service_entry(), &service(json!({}))).is_ok());
    }

    #[test]
    fn values_render_as_go_prints_decoded_json() {
        assert_eq!(
            go_value_text(&json!({"spec": {"b": [1, "x", null, true], "a": 1.5}})),
            "map[spec:map[a:1.5 b:[1 x <nil> true]]]"
        );
    }

    #[test]
    fn only_upstreams_directives_are_supported() {
        assert_eq!(Directive::parse(""), Some(Directive::Warn));
        assert_eq!(Directive::parse("Strict"), Some(Directive::Strict));
        assert_eq!(Directive::parse("strict"), None);
        assert_eq!(
            unsupported("strict").message,
            "Unsupported value: \"strict\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
        );
    }
}

//! Object metadata bookkeeping shared by every resource: uids, timestamps, names.

use std::time::SystemTime;

use rand::Rng;
use serde_json::{Map, Value};

/// Current time in the RFC 3339 second-precision format Kubernetes uses for `metav1.Time`.
pub fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// A random RFC 4122 version-4 UUID string.
pub fn new_uid() -> String {
    let mut bytes: [u8; 16] = rand::rng().random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Whether `uid` can be kept as a recorded object's UID: 1 to 64 ASCII letters, digits and
/// dashes. Clusters write UUIDs; the bound keeps names derived from it (cloud load-balancer
/// names, tags) within what every cloud accepts.
pub fn plausible_uid(uid: &str) -> bool {
    (1..=64).contains(&uid.len()) && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The random suffix kube-apiserver appends to `generateName` (5 characters from an alphabet
/// without vowels, so no words are spelled by accident).
pub fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// A copy of `object` keeping, of the list at `pointer` (`/metadata/finalizers`), only the
/// items `keep` accepts; an absent list stays absent.
pub fn retaining(object: &Value, pointer: &str, keep: impl FnMut(&Value) -> bool) -> Value {
    let mut next = object.clone();
    if let Some(items) = next.pointer_mut(pointer).and_then(Value::as_array_mut) {
        items.retain(keep);
    }
    next
}

/// `metadata` of an object as a mutable map, created if missing or not an object.
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = Value::Object(Map::new());
    }
    let Value::Object(map) = object else {
        unreachable!("object was just made a JSON object")
    };
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    match meta {
        Value::Object(m) => m,
        _ => unreachable!("metadata was just made a JSON object"),
    }
}

/// A string field of `metadata`, if present and non-empty.
pub fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// `metadata.name`.
pub fn name(object: &Value) -> Option<&str> {
    meta_str(object, "name")
}

/// `metadata.namespace`.
pub fn namespace(object: &Value) -> Option<&str> {
    meta_str(object, "namespace")
}

/// `metadata.resourceVersion`.
pub fn resource_version(object: &Value) -> Option<&str> {
    meta_str(object, "resourceVersion")
}

/// `metadata.finalizers` as strings.
pub fn finalizers(object: &Value) -> Vec<&str> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Whether `metadata.deletionTimestamp` is set.
pub fn is_deleting(object: &Value) -> bool {
    meta_str(object, "deletionTimestamp").is_some()
}

/// Whether `name` is a DNS-1123 subdomain (the general rule for object names).
pub fn is_dns1123_subdomain(name: &str) -> bool {
    name.len() <= 253 && matches_subdomain_pattern(name)
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`, whatever the length.
fn matches_subdomain_pattern(name: &str) -> bool {
    !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// What is wrong with `name` as a URL path segment (`path.IsValidPathSegmentName`, the only
/// rule kube-apiserver applies to the names of kinds without their own, such as core/v1
/// Events): it may not be `.` or `..`, nor contain `/` or `%`.
pub fn path_segment_name_problems(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .into_iter()
        .filter(|illegal| name.contains(illegal))
        .map(|illegal| format!("may not contain '{illegal}'"))
        .collect()
}

/// Whether `name` is a DNS-1123 label (namespaces).
pub fn is_dns1123_label(name: &str) -> bool {
    !name.is_empty() && name.len() <= 63 && !name.contains('.') && is_dns1123_subdomain(name)
}

/// kube-apiserver's message for a value that is not a DNS-1123 label (`IsDNS1123Label`).
pub const DNS1123_LABEL_DETAIL: &str = "a lowercase RFC 1123 label must consist of lower case \
    alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. \
    'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// kube-apiserver's message for a value that is not a DNS-1123 subdomain
/// (`IsDNS1123Subdomain`).
pub const DNS1123_SUBDOMAIN_DETAIL: &str = "a lowercase RFC 1123 subdomain must consist of lower \
    case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric \
    character (e.g. 'example.com', regex used for validation is \
    '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// kube-apiserver's message for a value that is not a qualified name (`IsQualifiedName`).
pub const QUALIFIED_NAME_DETAIL: &str = "name part must consist of alphanumeric characters, \
    '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or \
    'my.name',  or '123-abc', regex used for validation is \
    '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' \
    (e.g. 'example.com/MyName')";

/// Whether `value` is a Kubernetes qualified name (`IsQualifiedName`: label keys,
/// `loadBalancerClass`, `appProtocol`): an optional DNS-1123 subdomain prefix and `/`, then 1–63
/// alphanumerics, `-`, `_` or `.`, alphanumeric at both ends.
pub fn is_qualified_name(value: &str) -> bool {
    let (prefix, name) = match value.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, value),
    };
    name.len() <= 63 && matches_name_pattern(name) && prefix.is_none_or(is_dns1123_subdomain)
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, the pattern of a qualified name's name part and
/// of a non-empty label value.
fn matches_name_pattern(name: &str) -> bool {
    let bytes = name.as_bytes();
    bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `IsQualifiedName`'s messages for `value`, word for word (k8s.io/apimachinery
/// pkg/util/validation, v0.33): one per broken rule, empty when `value` is a qualified name.
pub fn qualified_name_problems(value: &str) -> Vec<String> {
    const NAME_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must \
        start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or \
        '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    let mut problems = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                problems.push("prefix part must be non-empty".to_string());
            } else {
                problems.extend(
                    dns1123_subdomain_problems(prefix)
                        .into_iter()
                        .map(|problem| format!("prefix part {problem}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {NAME_RULE} with an optional DNS subdomain prefix and '/' (e.g. \
                 'example.com/MyName')"
            )];
        }
    };
    if name.is_empty() {
        problems.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        problems.push("name part must be no more than 63 characters".to_string());
    }
    if !matches_name_pattern(name) {
        problems.push(format!("name part {NAME_RULE}"));
    }
    problems
}

/// `IsDNS1123Subdomain`'s messages for `value`, word for word.
pub fn dns1123_subdomain_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > 253 {
        problems.push("must be no more than 253 characters".to_string());
    }
    if !matches_subdomain_pattern(value) {
        problems.push(DNS1123_SUBDOMAIN_DETAIL.to_string());
    }
    problems
}

/// kube-apiserver's message for a value that is not a DNS-1035 label (`IsDNS1035Label`).
pub const DNS1035_LABEL_DETAIL: &str = "a DNS-1035 label must consist of lower case alphanumeric \
    characters or '-', start with an alphabetic character, and end with an alphanumeric character \
    (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

/// `IsDNS1123Label`'s messages for `value`, word for word (namespace names).
pub fn dns1123_label_problems(value: &str) -> Vec<String> {
    label_problems(
        value,
        matches_subdomain_pattern(value) && !value.contains('.'),
        DNS1123_LABEL_DETAIL,
    )
}

/// `IsDNS1035Label`'s messages for `value`, word for word (Service names).
pub fn dns1035_label_problems(value: &str) -> Vec<String> {
    let pattern_ok = matches_subdomain_pattern(value)
        && !value.contains('.')
        && value.starts_with(|c: char| c.is_ascii_lowercase());
    label_problems(value, pattern_ok, DNS1035_LABEL_DETAIL)
}

fn label_problems(value: &str, pattern_ok: bool, detail: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > 63 {
        problems.push("must be no more than 63 characters".to_string());
    }
    if !pattern_ok {
        problems.push(detail.to_string());
    }
    problems
}

/// Go's rendering of a string list in messages (`%#v`): `[]string{"a", "b"}`.
pub fn go_strings<S: AsRef<str>>(list: &[S]) -> String {
    let inner: Vec<String> = list.iter().map(|s| format!("{:?}", s.as_ref())).collect();
    format!("[]string{{{}}}", inner.join(", "))
}

/// kube-apiserver's message for a value that is not a CIDR (`IsValidCIDR`).
pub const CIDR_DETAIL: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";

/// Whether `value` is a valid label value: empty, or up to 63 alphanumerics, `-`, `_` or `.`,
/// alphanumeric at both ends.
pub fn is_label_value(value: &str) -> bool {
    value.is_empty() || (value.len() <= 63 && matches_name_pattern(value))
}

/// kube-apiserver's message for a value that is not a label value (`IsValidLabelValue`).
pub const LABEL_VALUE_DETAIL: &str = "a valid label must be an empty string or consist of \
    alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric \
    character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is \
    '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// `IsValidLabelValue`'s messages for `value`, word for word.
pub fn label_value_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > 63 {
        problems.push("must be no more than 63 characters".to_string());
    }
    if !value.is_empty() && !matches_name_pattern(value) {
        problems.push(LABEL_VALUE_DETAIL.to_string());
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_shape() {
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(uid.as_bytes()[14], b'4');
        assert_ne!(uid, new_uid());
    }

    #[test]
    fn timestamp_shape() {
        let ts = now();
        assert!(ts.ends_with('Z') && ts.len() == 20, "{ts}");
    }

    /// The name rules' messages, word for word as kube-apiserver 1.33 words them.
    #[test]
    fn name_messages() {
        let long = "a".repeat(64);
        let too_long = "must be no more than 63 characters";
        assert_eq!(dns1123_label_problems("web-1"), Vec::<String>::new());
        assert_eq!(dns1123_label_problems("a.b"), [DNS1123_LABEL_DETAIL]);
        assert_eq!(dns1123_label_problems(&long), [too_long]);
        assert_eq!(
            dns1035_label_problems(&format!("1{long}")),
            [too_long, DNS1035_LABEL_DETAIL]
        );
        assert!(DNS1035_LABEL_DETAIL.ends_with("(e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"));
        assert_eq!(
            dns1123_subdomain_problems("example.com"),
            Vec::<String>::new()
        );
        assert_eq!(
            dns1123_subdomain_problems("Example.com"),
            [DNS1123_SUBDOMAIN_DETAIL]
        );
        assert_eq!(
            dns1123_subdomain_problems(&format!("{}.a", "a".repeat(252))),
            ["must be no more than 253 characters"]
        );
        assert_eq!(label_value_problems(""), Vec::<String>::new());
        assert_eq!(label_value_problems("x_y.Z-1"), Vec::<String>::new());
        assert_eq!(label_value_problems("-x"), [LABEL_VALUE_DETAIL]);
        assert_eq!(
            qualified_name_problems(&long),
            ["name part must be no more than 63 characters"]
        );
        assert_eq!(
            qualified_name_problems("example.com/").len(),
            2,
            "empty name part: empty and pattern"
        );
    }

    #[test]
    fn name_rules() {
        let cases: &[(&str, bool, bool, bool)] = &[
            // name, subdomain, label, dns1035
            ("web", true, true, true),
            ("web-1", true, true, true),
            ("1web", true, true, false),
            ("a.b", true, false, false),
            ("Web", false, false, false),
            ("-web", false, false, false),
            ("web-", false, false, false),
            ("", false, false, false),
        ];
        for (name, sub, label, d1035) in cases {
            assert_eq!(is_dns1123_subdomain(name), *sub, "{name}");
            assert_eq!(is_dns1123_label(name), *label, "{name}");
            assert_eq!(dns1035_label_problems(name).is_empty(), *d1035, "{name}");
        }
        assert!(!is_dns1123_label(&"a".repeat(64)));
    }

    /// `IsQualifiedName` (k8s.io/apimachinery/pkg/util/validation), used by ValidateService for
    /// `loadBalancerClass` and `appProtocol` and by the 1.17–1.21 API for `topologyKeys`.
    #[test]
    fn path_segment_names() {
        for (name, problems) in [
            ("Web_1.ABC", vec![]),
            ("..", vec!["may not be '..'"]),
            ("a/b%c", vec!["may not contain '/'", "may not contain '%'"]),
        ] {
            assert_eq!(path_segment_name_problems(name), problems, "{name:?}");
        }
    }

    #[test]
    fn qualified_names() {
        let cases = [
            ("kubernetes.io/hostname", true),
            ("topology.kubernetes.io/zone", true),
            ("MyName", true),
            ("my.name_x-1", true),
            ("example.com/lb", true),
            ("", false),
            ("/name", false),
            ("example.com/", false),
            ("Example.com/name", false),
            ("-name", false),
            ("name-", false),
            ("a/b/c", false),
            ("bad key", false),
            ("*", false),
        ];
        for (value, ok) in cases {
            assert_eq!(is_qualified_name(value), ok, "{value:?}");
        }
        assert!(is_qualified_name(&"a".repeat(63)));
        assert!(!is_qualified_name(&"a".repeat(64)));
    }

    #[test]
    fn generated_suffix() {
        let s = name_suffix();
        assert_eq!(s.len(), 5);
        assert!(
            s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        );
    }
}

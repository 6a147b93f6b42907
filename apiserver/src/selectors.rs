//! Label and field selectors: parsing and matching, kept free of I/O.

use std::collections::BTreeSet;

use serde_json::Value;

/// A selector that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A requirement has no key.
    #[error("empty key in selector requirement {0:?}")]
    EmptyKey(String),
    /// A set-based requirement lacks its parenthesised value list.
    #[error("expected a parenthesised value list in {0:?}")]
    MissingValues(String),
    /// Parentheses do not balance.
    #[error("unbalanced parentheses in selector {0:?}")]
    Unbalanced(String),
    /// A field selector requirement is not `field=value` / `field!=value`.
    #[error("invalid field selector requirement {0:?}")]
    InvalidField(String),
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelRequirement {
    /// `key=value` / `key==value`.
    Equals(String, String),
    /// `key!=value` (also true when the label is absent).
    NotEquals(String, String),
    /// `key in (a,b)`.
    In(String, BTreeSet<String>),
    /// `key notin (a,b)` (also true when the label is absent).
    NotIn(String, BTreeSet<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    DoesNotExist(String),
}

/// A parsed label selector: all requirements must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(input: &str) -> Result<Vec<&str>, SelectorError> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(SelectorError::Unbalanced(input.to_string()));
                }
            }
            ',' if depth == 0 => {
                parts.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(SelectorError::Unbalanced(input.to_string()));
    }
    parts.push(&input[start..]);
    Ok(parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect())
}

fn parse_value_set(rest: &str, whole: &str) -> Result<BTreeSet<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| SelectorError::MissingValues(whole.to_string()))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn non_empty_key(key: &str, whole: &str) -> Result<String, SelectorError> {
    let key = key.trim();
    if key.is_empty() {
        Err(SelectorError::EmptyKey(whole.to_string()))
    } else {
        Ok(key.to_string())
    }
}

fn parse_requirement(req: &str) -> Result<LabelRequirement, SelectorError> {
    if let Some(key) = req.strip_prefix('!') {
        return Ok(LabelRequirement::DoesNotExist(non_empty_key(key, req)?));
    }
    if let Some((key, value)) = req.split_once("!=") {
        return Ok(LabelRequirement::NotEquals(
            non_empty_key(key, req)?,
            value.trim().to_string(),
        ));
    }
    if let Some((key, value)) = req.split_once("==").or_else(|| req.split_once('=')) {
        return Ok(LabelRequirement::Equals(
            non_empty_key(key, req)?,
            value.trim().to_string(),
        ));
    }
    // Set-based forms: `key in (...)`, `key notin (...)`.
    let mut words = req.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or_default();
    let rest = words.next().unwrap_or_default().trim_start();
    if let Some(values) = rest.strip_prefix("notin") {
        return Ok(LabelRequirement::NotIn(
            non_empty_key(key, req)?,
            parse_value_set(values, req)?,
        ));
    }
    if let Some(values) = rest.strip_prefix("in") {
        return Ok(LabelRequirement::In(
            non_empty_key(key, req)?,
            parse_value_set(values, req)?,
        ));
    }
    if rest.is_empty() && !key.contains('(') {
        return Ok(LabelRequirement::Exists(non_empty_key(key, req)?));
    }
    Err(SelectorError::MissingValues(req.to_string()))
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter syntax.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let requirements = split_top_level(input)?
            .into_iter()
            .map(parse_requirement)
            .collect::<Result<_, _>>()?;
        Ok(Self { requirements })
    }

    /// Whether the selector has no requirements (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.requirements.iter().all(|req| match req {
            LabelRequirement::Equals(k, v) => label(k) == Some(v.as_str()),
            LabelRequirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            LabelRequirement::In(k, vs) => label(k).is_some_and(|l| vs.contains(l)),
            LabelRequirement::NotIn(k, vs) => !label(k).is_some_and(|l| vs.contains(l)),
            LabelRequirement::Exists(k) => label(k).is_some(),
            LabelRequirement::DoesNotExist(k) => label(k).is_none(),
        })
    }
}

/// One requirement of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldRequirement {
    path: Vec<String>,
    value: String,
    negated: bool,
}

/// A parsed field selector (`metadata.name=x,spec.nodeName!=y`).
///
/// Any dotted path to a scalar is accepted (kube-apiserver restricts the set per resource; being
/// lenient lets `kubectl describe` select events by `involvedObject.*`). A missing field compares
/// as the empty string, as in kube-apiserver.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter syntax.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for part in input.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (path, value, negated) = if let Some((p, v)) = part.split_once("!=") {
                (p, v, true)
            } else if let Some((p, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (p, v, false)
            } else {
                return Err(SelectorError::InvalidField(part.to_string()));
            };
            let path = path.trim();
            if path.is_empty() {
                return Err(SelectorError::InvalidField(part.to_string()));
            }
            requirements.push(FieldRequirement {
                path: path.split('.').map(str::to_string).collect(),
                value: value.trim().to_string(),
                negated,
            });
        }
        Ok(Self { requirements })
    }

    /// Whether the object satisfies every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        self.requirements.iter().all(|req| {
            let mut current = Some(object);
            for segment in &req.path {
                current = current.and_then(|v| v.get(segment));
            }
            let actual = match current {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == req.value) != req.negated
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}, "spec": {"nodeName": "n1"}})
    }

    #[test]
    fn label_selector_table() {
        let labels = json!({"app": "web", "tier": "front", "env": "prod"});
        let cases: &[(&str, bool)] = &[
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app in (web,db)", true),
            ("app in (db, cache)", false),
            ("app notin (db)", true),
            ("app notin (web)", false),
            ("missing notin (x)", true),
            ("missing in (x)", false),
            ("tier", true),
            ("missing", false),
            ("!missing", true),
            ("!tier", false),
            ("app=web,tier in (front,back),!missing", true),
            ("app=web,env=dev", false),
            ("  app = web , tier ", true),
        ];
        for (selector, want) in cases {
            let parsed = LabelSelector::parse(selector).unwrap();
            assert_eq!(parsed.matches(&obj(labels.clone())), *want, "{selector}");
        }
    }

    #[test]
    fn label_selector_without_labels() {
        let no_labels = json!({"metadata": {"name": "a"}});
        assert!(LabelSelector::parse("!app").unwrap().matches(&no_labels));
        assert!(!LabelSelector::parse("app").unwrap().matches(&no_labels));
        assert!(LabelSelector::parse("app!=x").unwrap().matches(&no_labels));
    }

    #[test]
    fn label_selector_errors() {
        for bad in ["app in (a", "app in a", "=x", "!", "app in", "a)"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad} should fail");
        }
    }

    #[test]
    fn field_selector_table() {
        let o = obj(json!({}));
        let cases: &[(&str, bool)] = &[
            ("metadata.name=a", true),
            ("metadata.name==a", true),
            ("metadata.name=b", false),
            ("metadata.name!=b", true),
            ("metadata.namespace=ns,metadata.name=a", true),
            ("spec.nodeName=n1", true),
            ("spec.nodeName=", false),
            ("spec.missing=", true),
            ("spec.missing!=", false),
        ];
        for (selector, want) in cases {
            let parsed = FieldSelector::parse(selector).unwrap();
            assert_eq!(parsed.matches(&o), *want, "{selector}");
        }
        assert!(FieldSelector::parse("metadata.name").is_err());
        assert!(FieldSelector::parse("=a").is_err());
    }
}

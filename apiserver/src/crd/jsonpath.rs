//! The JSONPath subset CRD printer columns use: `.a.b`, `.a[0]`, `.a[*].b`, `['a.b']` and
//! one-comparison filters `.a[?(@.type=="Ready")].status`.

use serde_json::Value;

/// One step of a path.
#[derive(Debug, Clone, PartialEq)]
pub enum Segment {
    /// A map key.
    Field(String),
    /// A list index (negative counts from the end).
    Index(i64),
    /// Every element of a list or every value of a map.
    Wildcard,
    /// List elements whose `path` compares to `value` (`==` when `equal`, else `!=`).
    Filter {
        /// Path inside the element.
        path: Vec<String>,
        /// `==` or `!=`.
        equal: bool,
        /// The literal compared with.
        value: Value,
    },
}

/// A path that is not in the supported subset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported JSONPath {0:?}")]
pub struct PathError(pub String);

/// Parses a path, with or without the `{…}` template braces.
pub fn parse(path: &str) -> Result<Vec<Segment>, PathError> {
    let error = || PathError(path.to_string());
    let text = path.trim();
    let text = text
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .unwrap_or(text);
    let text = text.strip_prefix('$').unwrap_or(text);
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let name = &after[..end];
            if name.is_empty() {
                return Err(error());
            }
            out.push(if name == "*" {
                Segment::Wildcard
            } else {
                Segment::Field(name.to_string())
            });
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = matching_bracket(after).ok_or_else(error)?;
            let inner = after[..end].trim();
            rest = &after[end + 1..];
            out.push(bracket(inner).ok_or_else(error)?);
        } else {
            return Err(error());
        }
    }
    if out.is_empty() {
        return Err(error());
    }
    Ok(out)
}

/// Index of the `]` closing a bracket, skipping quoted text.
fn matching_bracket(text: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, ']') => return Some(i),
            _ => {}
        }
    }
    None
}

fn unquote(text: &str) -> Option<&str> {
    let text = text.trim();
    text.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .or_else(|| text.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')))
}

fn bracket(inner: &str) -> Option<Segment> {
    if inner == "*" {
        return Some(Segment::Wildcard);
    }
    if let Ok(index) = inner.parse::<i64>() {
        return Some(Segment::Index(index));
    }
    if let Some(name) = unquote(inner) {
        return Some(Segment::Field(name.to_string()));
    }
    let filter = inner.strip_prefix("?(")?.strip_suffix(')')?.trim();
    let (lhs, rhs, equal) = if let Some((l, r)) = filter.split_once("==") {
        (l, r, true)
    } else {
        let (l, r) = filter.split_once("!=")?;
        (l, r, false)
    };
    let lhs = lhs.trim().strip_prefix('@')?;
    let path: Vec<String> = lhs.split('.').skip(1).map(str::to_string).collect();
    if path.is_empty() || path.iter().any(String::is_empty) {
        return None;
    }
    let value = match unquote(rhs) {
        Some(s) => Value::String(s.to_string()),
        None => serde_json::from_str(rhs.trim()).ok()?,
    };
    Some(Segment::Filter { path, equal, value })
}

/// Every value the path selects, in document order.
pub fn evaluate<'a>(segments: &[Segment], root: &'a Value) -> Vec<&'a Value> {
    let mut current = vec![root];
    for segment in segments {
        let mut next = Vec::new();
        for value in current {
            match (segment, value) {
                (Segment::Field(name), Value::Object(map)) => next.extend(map.get(name)),
                (Segment::Index(i), Value::Array(items)) => {
                    let len = i64::try_from(items.len()).unwrap_or(i64::MAX);
                    let at = if *i < 0 { len + i } else { *i };
                    if let Ok(at) = usize::try_from(at) {
                        next.extend(items.get(at));
                    }
                }
                (Segment::Wildcard, Value::Array(items)) => next.extend(items.iter()),
                (Segment::Wildcard, Value::Object(map)) => next.extend(map.values()),
                (Segment::Filter { path, equal, value }, Value::Array(items)) => {
                    next.extend(items.iter().filter(|item| {
                        let found = path.iter().try_fold(*item, |v, k| v.get(k));
                        (found == Some(value)) == *equal
                    }));
                }
                _ => {}
            }
        }
        current = next;
    }
    current
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_select_what_kubectl_columns_show() {
        let object = json!({
            "metadata": {"name": "pool", "labels": {"a.b/c": "x"}},
            "spec": {"cidrs": ["10.0.0.0/24", "10.0.1.0/24"], "count": 3},
            "status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Degraded", "status": "False"}
            ]}
        });
        let cases: Vec<(&str, Vec<Value>)> = vec![
            (".metadata.name", vec![json!("pool")]),
            (".spec.cidrs", vec![json!(["10.0.0.0/24", "10.0.1.0/24"])]),
            (".spec.cidrs[1]", vec![json!("10.0.1.0/24")]),
            (".spec.cidrs[-1]", vec![json!("10.0.1.0/24")]),
            (
                ".spec.cidrs[*]",
                vec![json!("10.0.0.0/24"), json!("10.0.1.0/24")],
            ),
            (".spec.count", vec![json!(3)]),
            (
                ".status.conditions[?(@.type==\"Ready\")].status",
                vec![json!("True")],
            ),
            (
                ".status.conditions[?(@.type!='Ready')].type",
                vec![json!("Degraded")],
            ),
            (".metadata.labels['a.b/c']", vec![json!("x")]),
            ("{.spec.count}", vec![json!(3)]),
            (".spec.missing", vec![]),
        ];
        for (path, want) in cases {
            let segments = parse(path).unwrap();
            let got: Vec<Value> = evaluate(&segments, &object).into_iter().cloned().collect();
            assert_eq!(got, want, "{path}");
        }
    }

    #[test]
    fn unsupported_paths_are_errors() {
        for path in ["", "spec", ".a[", ".a..b", ".a[?(@.x>1)]"] {
            assert!(parse(path).is_err(), "{path}");
        }
    }
}

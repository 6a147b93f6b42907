//! The GCE list `filter` syntax the load-balancer providers use: one or more
//! `field eq|ne <RE2 regexp>` terms, optionally parenthesised, all of which must hold. The
//! regexp must match the whole value. Newer `field = "value"` / `field != "value"` forms are
//! accepted as exact string comparisons.

use regex::Regex;
use serde_json::Value;

use crate::error::ApiError;

/// One parsed term.
#[derive(Debug)]
enum Term {
    /// `field eq re` (`negate == false`) or `field ne re`.
    Regex {
        field: String,
        re: Regex,
        negate: bool,
    },
    /// `field = "v"` or `field != "v"`.
    Exact {
        field: String,
        value: String,
        negate: bool,
    },
}

/// A parsed filter: every term must match.
#[derive(Debug, Default)]
pub struct Filter {
    terms: Vec<Term>,
}

impl Filter {
    /// Parses a filter expression; an empty expression matches everything.
    pub fn parse(expr: &str) -> Result<Filter, ApiError> {
        let cleaned: String = expr
            .chars()
            .map(|c| if c == '(' || c == ')' { ' ' } else { c })
            .collect();
        let tokens = tokenize(&cleaned);
        let mut terms = Vec::new();
        let mut i = 0;
        while i < tokens.len() {
            if tokens[i].eq_ignore_ascii_case("AND") {
                i += 1;
                continue;
            }
            let (Some(field), Some(op), Some(value)) =
                (tokens.get(i), tokens.get(i + 1), tokens.get(i + 2))
            else {
                return Err(ApiError::invalid(format!(
                    "Invalid list filter expression '{expr}'"
                )));
            };
            let term = match op.as_str() {
                "eq" | "ne" => {
                    let re = Regex::new(&format!("^(?:{value})$")).map_err(|e| {
                        ApiError::invalid(format!("Invalid regular expression '{value}': {e}"))
                    })?;
                    Term::Regex {
                        field: field.clone(),
                        re,
                        negate: op == "ne",
                    }
                }
                "=" | "!=" => Term::Exact {
                    field: field.clone(),
                    value: value.clone(),
                    negate: op == "!=",
                },
                other => {
                    return Err(ApiError::invalid(format!(
                        "Invalid list filter expression '{expr}': unknown operator '{other}'"
                    )));
                }
            };
            terms.push(term);
            i += 3;
        }
        Ok(Filter { terms })
    }

    /// True when `resource` satisfies every term.
    pub fn matches(&self, resource: &Value) -> bool {
        self.terms.iter().all(|term| match term {
            Term::Regex { field, re, negate } => {
                re.is_match(&field_text(resource, field)) != *negate
            }
            Term::Exact {
                field,
                value,
                negate,
            } => (field_text(resource, field) == *value) != *negate,
        })
    }
}

/// Splits on whitespace, keeping double-quoted strings (without their quotes) as one token.
fn tokenize(input: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in input.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                if !quoted {
                    tokens.push(std::mem::take(&mut current));
                }
            }
            c if c.is_whitespace() && !quoted => {
                if !current.is_empty() {
                    tokens.push(std::mem::take(&mut current));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

/// A top-level (or dotted) field of a resource as text; missing fields are the empty string.
fn field_text(resource: &Value, field: &str) -> String {
    let mut value = resource;
    for part in field.split('.') {
        match value.get(part) {
            Some(v) => value = v,
            None => return String::new(),
        }
    }
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn filters_match_like_gce() {
        let address =
            json!({"name": "a1", "address": "10.0.0.5", "region": "https://x/regions/r1"});
        let cases = [
            ("", true),
            ("name eq a1", true),
            ("name eq a", false),
            ("name eq a.*", true),
            ("name ne a1", false),
            ("(name eq a1) (address eq 10.0.0.5)", true),
            ("(name eq a1) (address eq 10.0.0.6)", false),
            ("region eq .*/regions/r1", true),
            ("address = \"10.0.0.5\"", true),
            ("address != \"10.0.0.5\"", false),
            ("missing eq x", false),
        ];
        for (expr, want) in cases {
            let filter = Filter::parse(expr).unwrap();
            assert_eq!(filter.matches(&address), want, "{expr}");
        }
    }

    #[test]
    fn malformed_filters_are_rejected() {
        for expr in ["name", "name eq", "name like x", "name eq ("] {
            assert!(Filter::parse(expr).is_err(), "{expr}");
        }
    }
}

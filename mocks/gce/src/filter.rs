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
    /// Parses a filter expression; an empty expression matches everything. Parentheses at
    /// the start of a term group terms; inside a value they belong to the regexp.
    pub fn parse(expr: &str) -> Result<Filter, ApiError> {
        let chars: Vec<char> = expr.chars().collect();
        let mut terms = Vec::new();
        parse_terms(&chars, expr, &mut terms)?;
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

fn malformed(expr: &str) -> ApiError {
    ApiError::invalid(format!("Invalid list filter expression '{expr}'"))
}

fn skip_space(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() && chars[i].is_whitespace() {
        i += 1;
    }
    i
}

/// A word up to the next whitespace.
fn word(chars: &[char], mut i: usize) -> (String, usize) {
    let start = i;
    while i < chars.len() && !chars[i].is_whitespace() {
        i += 1;
    }
    (chars[start..i].iter().collect(), i)
}

/// A value: a double-quoted string, or characters up to whitespace outside parentheses.
fn value(chars: &[char], mut i: usize, expr: &str) -> Result<(String, usize), ApiError> {
    if chars.get(i) == Some(&'"') {
        let start = i + 1;
        let end = chars[start..]
            .iter()
            .position(|c| *c == '"')
            .map(|p| start + p)
            .ok_or_else(|| malformed(expr))?;
        return Ok((chars[start..end].iter().collect(), end + 1));
    }
    let start = i;
    let mut depth = 0usize;
    while i < chars.len() {
        match chars[i] {
            '(' => depth += 1,
            ')' if depth == 0 => break,
            ')' => depth -= 1,
            c if c.is_whitespace() && depth == 0 => break,
            _ => {}
        }
        i += 1;
    }
    if depth != 0 || i == start {
        return Err(malformed(expr));
    }
    Ok((chars[start..i].iter().collect(), i))
}

fn parse_terms(chars: &[char], expr: &str, terms: &mut Vec<Term>) -> Result<(), ApiError> {
    let mut i = skip_space(chars, 0);
    while i < chars.len() {
        if chars[i] == '(' {
            let mut depth = 0usize;
            let mut close = None;
            for (j, c) in chars.iter().enumerate().skip(i) {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            close = Some(j);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let close = close.ok_or_else(|| malformed(expr))?;
            parse_terms(&chars[i + 1..close], expr, terms)?;
            i = skip_space(chars, close + 1);
            continue;
        }
        let (field, next) = word(chars, i);
        if field.eq_ignore_ascii_case("AND") {
            i = skip_space(chars, next);
            continue;
        }
        let (op, next) = word(chars, skip_space(chars, next));
        let start = skip_space(chars, next);
        if op.is_empty() || start >= chars.len() {
            return Err(malformed(expr));
        }
        let (value, next) = value(chars, start, expr)?;
        let term = match op.as_str() {
            "eq" | "ne" => {
                let re = Regex::new(&format!("^(?:{value})$")).map_err(|e| {
                    ApiError::invalid(format!("Invalid regular expression '{value}': {e}"))
                })?;
                Term::Regex {
                    field,
                    re,
                    negate: op == "ne",
                }
            }
            "=" | "!=" => Term::Exact {
                field,
                value,
                negate: op == "!=",
            },
            other => {
                return Err(ApiError::invalid(format!(
                    "Invalid list filter expression '{expr}': unknown operator '{other}'"
                )));
            }
        };
        terms.push(term);
        i = skip_space(chars, next);
    }
    Ok(())
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
            ("name eq (a1|b1)", true),
            ("name eq (b1|c1)", false),
            ("(name eq (x|a1)) (address eq 10\\.0\\.0\\.5)", true),
        ];
        for (expr, want) in cases {
            let filter = Filter::parse(expr).unwrap();
            assert_eq!(filter.matches(&address), want, "{expr}");
        }
    }

    #[test]
    fn malformed_filters_are_rejected() {
        for expr in [
            "name",
            "name eq",
            "name like x",
            "name eq (",
            "(name eq a",
            "name = \"open",
        ] {
            assert!(Filter::parse(expr).is_err(), "{expr}");
        }
    }
}

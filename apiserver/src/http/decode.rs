//! Bounded decoding of request bodies, so no body can make the server allocate without limit.
//!
//! kube-apiserver refuses bodies over 3 MiB ([`MAX_BODY_BYTES`], its `MaxRequestBodyBytes`) and
//! parses JSON with a nesting limit; serde_json's own limit (128) covers the latter here. YAML
//! needs more: an alias may be expanded many times ("billion laughs"), and serde_yaml_ng's
//! repetition limit allows about a hundred expansions per event, which with one large anchored
//! list is still quadratic. [`yaml_value`] therefore builds the value under a budget proportional
//! to the body (every node and every string byte costs), and refuses a document that expands
//! beyond it. Deep flow nesting (`[[[[…`) is refused by a scan before the YAML parser runs:
//! the parser needs time quadratic in the depth (100,000 levels took 100 s here) before the
//! deserializer's own depth limit is ever reached.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::status::ApiError;

/// The largest request body accepted (kube-apiserver's `MaxRequestBodyBytes`).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// How much of an oversized body is read and dropped so the client, still sending, gets the
/// 413 instead of a reset connection; past this the connection is given up.
const MAX_DRAIN_BYTES: usize = 4 * MAX_BODY_BYTES;

/// Reads a request body of at most [`MAX_BODY_BYTES`]. A larger one is read on (and dropped, so
/// memory stays bounded) up to [`MAX_DRAIN_BYTES`] and answered with 413 as kube-apiserver
/// does; closing early would make most clients see a broken pipe instead of the Status.
pub async fn read_body(body: axum::body::Body) -> Result<bytes::Bytes, ApiError> {
    use futures::StreamExt as _;
    let mut stream = body.into_data_stream();
    let mut kept = Vec::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::bad_request(format!("the request body could not be read: {e}"))
        })?;
        seen = seen.saturating_add(chunk.len());
        if seen <= MAX_BODY_BYTES {
            kept.extend_from_slice(&chunk);
        } else {
            kept = Vec::new();
            if seen > MAX_DRAIN_BYTES {
                break;
            }
        }
    }
    if seen > MAX_BODY_BYTES {
        return Err(ApiError {
            code: 413,
            reason: "RequestEntityTooLarge",
            message: format!("Request entity too large: limit is {MAX_BODY_BYTES}"),
            details: Box::default(),
        });
    }
    Ok(bytes::Bytes::from(kept))
}

/// Deepest flow nesting accepted in YAML (the deserializer's own recursion limit).
pub const MAX_YAML_DEPTH: usize = 128;

/// Cost of one node beyond its string bytes: roughly the size of a `serde_json::Value`.
const NODE_COST: usize = 32;

/// Parses one YAML document into a JSON value, refusing documents whose expansion (through
/// aliases) costs more than a fixed multiple of the body's size.
pub fn yaml_value(body: &[u8]) -> Result<Value, String> {
    if let Some(depth) = flow_depth_over(body, MAX_YAML_DEPTH) {
        return Err(format!(
            "the document nests more than {MAX_YAML_DEPTH} levels deep (at least {depth}); refused"
        ));
    }
    // An alias-free document costs at most NODE_COST per byte plus its string bytes; the slack
    // lets a manifest reuse a few anchors.
    let budget = Budget(Cell::new(
        body.len().saturating_mul(NODE_COST + 1) + 1024 * 1024,
    ));
    let deserializer = serde_yaml_ng::Deserializer::from_slice(body);
    BoundedValue(&budget)
        .deserialize(deserializer)
        .map_err(|e| e.to_string())
}

/// The flow nesting depth (`[`, `{` outside quotes) once it passes `limit`, else `None`.
/// Block nesting needs indentation, so a body of the size limit cannot nest deep by it.
fn flow_depth_over(body: &[u8], limit: usize) -> Option<usize> {
    let mut depth = 0usize;
    let (mut in_double, mut in_single, mut escaped) = (false, false, false);
    for &byte in body {
        if in_double {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_double = false,
                _ => {}
            }
            continue;
        }
        if in_single {
            // `''` inside single quotes closes and reopens, which nets out the same.
            in_single = byte != b'\'';
            continue;
        }
        match byte {
            b'"' => in_double = true,
            b'\'' => in_single = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return Some(depth);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

#[derive(Debug)]
struct Budget(Cell<usize>);

impl Budget {
    fn charge<E: de::Error>(&self, cost: usize) -> Result<(), E> {
        match self.0.get().checked_sub(cost) {
            Some(left) => {
                self.0.set(left);
                Ok(())
            }
            None => Err(E::custom(
                "the document expands to far more data than its size (repeated aliases?); refused",
            )),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct BoundedValue<'a>(&'a Budget);

impl<'de> DeserializeSeed<'de> for BoundedValue<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for BoundedValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-compatible YAML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.0.charge(NODE_COST)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.0.charge(NODE_COST)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.0.charge(NODE_COST)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.0.charge(NODE_COST)?;
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("{v} has no JSON representation")))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.0.charge(NODE_COST + v.len())?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.0.charge(NODE_COST + v.len())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.0.charge(NODE_COST)?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.0.charge(NODE_COST)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.0.charge(NODE_COST)?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.0.charge(key.len())?;
            let value = map.next_value_seed(self)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_yaml_decodes_like_serde_json_values() {
        let value = yaml_value(b"a: [1, -2, 2.5, true, null, x]\nb: {c: d}\n").unwrap();
        assert_eq!(
            value,
            serde_json::json!({"a": [1, -2, 2.5, true, null, "x"], "b": {"c": "d"}})
        );
        assert!(yaml_value(b"a: .nan").is_err());
        assert!(yaml_value(b"a: 1\n---\nb: 2\n").is_err());
    }

    #[test]
    fn alias_expansion_is_refused_beyond_the_budget() {
        // One anchored list of 2,000 items referenced 20,000 times: 40 million nodes if expanded,
        // under serde_yaml_ng's repetition limit but far over the budget.
        let mut body = String::from("a: &a [");
        body.push_str(&vec!["x"; 2000].join(","));
        body.push_str("]\nb: [");
        body.push_str(&vec!["*a"; 20000].join(","));
        body.push_str("]\n");
        let error = yaml_value(body.as_bytes()).unwrap_err();
        assert!(error.contains("expands"), "{error}");
        // A few aliases are fine.
        assert!(yaml_value(b"a: &a {x: 1}\nb: *a\nc: *a\n").is_ok());
    }

    #[test]
    fn deep_flow_nesting_is_refused_before_parsing() {
        let deep = |n: usize| format!("{}1{}", "{\"a\": ".repeat(n), "}".repeat(n));
        let started = std::time::Instant::now();
        let error = yaml_value(deep(200_000).as_bytes()).unwrap_err();
        assert!(error.contains("nests more than"), "{error}");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        assert!(yaml_value(deep(100).as_bytes()).is_ok());
        // Brackets inside quotes do not count.
        let quoted = format!("a: \"{}\"\nb: '{}'\n", "[".repeat(500), "{".repeat(500));
        assert!(yaml_value(quoted.as_bytes()).is_ok());
        assert!(yaml_value(b"a: &a {x: 1}\nb: *a\nc: *a\n").is_ok());
    }
}

//! The protobuf form of an OpenAPI v2 document: gnostic's `openapi.v2.Document`
//! (github.com/google/gnostic, `openapiv2/OpenAPIv2.proto`), which kubectl and client-go
//! before 1.27 ask for with `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`
//! and decode without a JSON fallback.
//!
//! The JSON document is converted message by message with the field numbers of that file; a
//! key this converter does not know is an error rather than silently lost, so the JSON and
//! protobuf forms cannot drift apart. Vendor extensions (`x-…`) and free values (`default`,
//! `enum`, `example`) travel as `Any { yaml }`; JSON is YAML, so the JSON text is used.

use serde_json::{Map, Value};

/// A key or value the protobuf form cannot carry.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("OpenAPI v2 protobuf encoding: {path}: {message}")]
pub struct EncodeError {
    /// JSON path of the offending key.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

fn error(path: &str, message: impl Into<String>) -> EncodeError {
    EncodeError {
        path: path.to_string(),
        message: message.into(),
    }
}

/// A protobuf message being written (wire format: varint keys, length-delimited submessages).
#[derive(Debug, Default)]
struct Message(Vec<u8>);

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

impl Message {
    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.0.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint((u64::from(field) << 3) | u64::from(wire));
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        self.key(field, LEN);
        self.varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    fn string(&mut self, field: u32, text: &str) {
        self.bytes(field, text.as_bytes());
    }

    fn message(&mut self, field: u32, message: &Message) {
        self.bytes(field, &message.0);
    }

    fn bool(&mut self, field: u32, value: bool) {
        self.key(field, VARINT);
        self.varint(u64::from(value));
    }

    fn int64(&mut self, field: u32, value: i64) {
        self.key(field, VARINT);
        // Two's complement, as protobuf encodes a negative int64.
        self.varint(value as u64);
    }

    fn double(&mut self, field: u32, value: f64) {
        self.key(field, FIXED64);
        self.0.extend_from_slice(&value.to_le_bytes());
    }
}

/// How one JSON key of a message is encoded.
#[derive(Clone, Copy)]
enum Field {
    Str(u32),
    Strs(u32),
    Bool(u32),
    Int64(u32),
    Double(u32),
    /// `Any { yaml = 2 }`.
    Any(u32),
    /// `repeated Any`.
    Anys(u32),
    /// A submessage built by a function.
    Sub(u32, Encoder),
    /// `repeated` submessage, one per JSON array item.
    Subs(u32, Encoder),
}

type Encoder = fn(&Value, &str) -> Result<Message, EncodeError>;

/// Encodes a JSON object with a table of its keys; `x-` keys go to `extensions` (the message's
/// `repeated NamedAny vendor_extension`).
fn object(
    value: &Value,
    path: &str,
    fields: &[(&str, Field)],
    extensions: Option<u32>,
) -> Result<Message, EncodeError> {
    let map = value
        .as_object()
        .ok_or_else(|| error(path, "expected an object"))?;
    let mut out = Message::default();
    for (key, value) in map {
        let at = format!("{path}/{key}");
        if key.starts_with("x-")
            && let Some(field) = extensions
        {
            out.message(field, &named(key, &any(value)));
            continue;
        }
        let Some((_, field)) = fields.iter().find(|(name, _)| name == key) else {
            return Err(error(&at, "no protobuf field for this key"));
        };
        match *field {
            Field::Str(n) => out.string(n, str_of(value, &at)?),
            Field::Strs(n) => {
                for item in array_of(value, &at)? {
                    out.string(n, str_of(item, &at)?);
                }
            }
            Field::Bool(n) => out.bool(
                n,
                value
                    .as_bool()
                    .ok_or_else(|| error(&at, "expected a boolean"))?,
            ),
            Field::Int64(n) => out.int64(
                n,
                value
                    .as_i64()
                    .ok_or_else(|| error(&at, "expected an integer"))?,
            ),
            Field::Double(n) => out.double(
                n,
                value
                    .as_f64()
                    .ok_or_else(|| error(&at, "expected a number"))?,
            ),
            Field::Any(n) => out.message(n, &any(value)),
            Field::Anys(n) => {
                for item in array_of(value, &at)? {
                    out.message(n, &any(item));
                }
            }
            Field::Sub(n, encode) => out.message(n, &encode(value, &at)?),
            Field::Subs(n, encode) => {
                for (i, item) in array_of(value, &at)?.iter().enumerate() {
                    out.message(n, &encode(item, &format!("{at}/{i}"))?);
                }
            }
        }
    }
    Ok(out)
}

fn str_of<'a>(value: &'a Value, path: &str) -> Result<&'a str, EncodeError> {
    value
        .as_str()
        .ok_or_else(|| error(path, "expected a string"))
}

fn array_of<'a>(value: &'a Value, path: &str) -> Result<&'a Vec<Value>, EncodeError> {
    value
        .as_array()
        .ok_or_else(|| error(path, "expected an array"))
}

/// `Any { yaml = 2 }`.
fn any(value: &Value) -> Message {
    let mut out = Message::default();
    out.string(2, &value.to_string());
    out
}

/// A message whose only field `field` holds `inner`: the oneof and single-field wrappers of
/// the gnostic schema (`SchemaItem`, `ResponseValue`, `NonBodyParameter`, ...).
fn wrap(field: u32, inner: &Message) -> Message {
    let mut out = Message::default();
    out.message(field, inner);
    out
}

/// `Named… { name = 1; value = 2 }`.
fn named(name: &str, value: &Message) -> Message {
    let mut out = Message::default();
    out.string(1, name);
    out.message(2, value);
    out
}

/// A JSON map as `repeated Named…` in field `field` of a wrapper message.
fn named_map(
    value: &Value,
    path: &str,
    field: u32,
    encode: Encoder,
) -> Result<Message, EncodeError> {
    let map: &Map<String, Value> = value
        .as_object()
        .ok_or_else(|| error(path, "expected an object"))?;
    let mut out = Message::default();
    for (name, item) in map {
        out.message(
            field,
            &named(name, &encode(item, &format!("{path}/{name}"))?),
        );
    }
    Ok(out)
}

/// `Document`.
fn document(value: &Value, path: &str) -> Result<Message, EncodeError> {
    object(
        value,
        path,
        &[
            ("swagger", Field::Str(1)),
            ("info", Field::Sub(2, info)),
            ("host", Field::Str(3)),
            ("basePath", Field::Str(4)),
            ("schemes", Field::Strs(5)),
            ("consumes", Field::Strs(6)),
            ("produces", Field::Strs(7)),
            ("paths", Field::Sub(8, paths)),
            ("definitions", Field::Sub(9, definitions)),
        ],
        Some(16),
    )
}

fn info(value: &Value, path: &str) -> Result<Message, EncodeError> {
    object(
        value,
        path,
        &[
            ("title", Field::Str(1)),
            ("version", Field::Str(2)),
            ("description", Field::Str(3)),
        ],
        Some(7),
    )
}

/// `Paths { repeated NamedPathItem path = 2 }`; extensions are field 1.
fn paths(value: &Value, path: &str) -> Result<Message, EncodeError> {
    named_map(value, path, 2, path_item)
}

fn path_item(value: &Value, path: &str) -> Result<Message, EncodeError> {
    object(
        value,
        path,
        &[
            ("$ref", Field::Str(1)),
            ("get", Field::Sub(2, operation)),
            ("put", Field::Sub(3, operation)),
            ("post", Field::Sub(4, operation)),
            ("delete", Field::Sub(5, operation)),
            ("options", Field::Sub(6, operation)),
            ("head", Field::Sub(7, operation)),
            ("patch", Field::Sub(8, operation)),
            ("parameters", Field::Subs(9, parameters_item)),
        ],
        Some(10),
    )
}

fn operation(value: &Value, path: &str) -> Result<Message, EncodeError> {
    object(
        value,
        path,
        &[
            ("tags", Field::Strs(1)),
            ("summary", Field::Str(2)),
            ("description", Field::Str(3)),
            ("operationId", Field::Str(5)),
            ("produces", Field::Strs(6)),
            ("consumes", Field::Strs(7)),
            ("parameters", Field::Subs(8, parameters_item)),
            ("responses", Field::Sub(9, responses)),
            ("schemes", Field::Strs(10)),
            ("deprecated", Field::Bool(11)),
        ],
        Some(13),
    )
}

/// `ParametersItem`: a `JsonReference` (2) or a `Parameter` (1), which is a `BodyParameter`
/// (1) or a `NonBodyParameter` (2) holding the sub-schema for its location.
fn parameters_item(value: &Value, path: &str) -> Result<Message, EncodeError> {
    if value.get("$ref").is_some() {
        let reference = object(
            value,
            path,
            &[("$ref", Field::Str(1)), ("description", Field::Str(2))],
            None,
        )?;
        return Ok(wrap(2, &reference));
    }
    let location = value.get("in").and_then(Value::as_str).unwrap_or_default();
    let parameter = match location {
        "body" => {
            let body = object(
                value,
                path,
                &[
                    ("description", Field::Str(1)),
                    ("name", Field::Str(2)),
                    ("in", Field::Str(3)),
                    ("required", Field::Bool(4)),
                    ("schema", Field::Sub(5, schema)),
                ],
                Some(6),
            )?;
            wrap(1, &body)
        }
        "query" => {
            let query = object(
                value,
                path,
                &[
                    ("required", Field::Bool(1)),
                    ("in", Field::Str(2)),
                    ("description", Field::Str(3)),
                    ("name", Field::Str(4)),
                    ("allowEmptyValue", Field::Bool(5)),
                    ("type", Field::Str(6)),
                    ("format", Field::Str(7)),
                    ("uniqueItems", Field::Bool(20)),
                ],
                Some(23),
            )?;
            wrap(2, &wrap(3, &query))
        }
        "path" => {
            let in_path = object(
                value,
                path,
                &[
                    ("required", Field::Bool(1)),
                    ("in", Field::Str(2)),
                    ("description", Field::Str(3)),
                    ("name", Field::Str(4)),
                    ("type", Field::Str(5)),
                    ("format", Field::Str(6)),
                    ("uniqueItems", Field::Bool(19)),
                ],
                Some(22),
            )?;
            wrap(2, &wrap(4, &in_path))
        }
        other => {
            return Err(error(
                path,
                format!("parameters in {other:?} are not encoded"),
            ));
        }
    };
    Ok(wrap(1, &parameter))
}

/// `Responses { repeated NamedResponseValue response_code = 1 }`, each value a
/// `ResponseValue { Response response = 1 }`.
fn responses(value: &Value, path: &str) -> Result<Message, EncodeError> {
    named_map(value, path, 1, |value, path| {
        let response = object(
            value,
            path,
            &[
                ("description", Field::Str(1)),
                ("schema", Field::Sub(2, schema_item)),
            ],
            Some(5),
        )?;
        Ok(wrap(1, &response))
    })
}

/// `SchemaItem { Schema schema = 1 }`.
fn schema_item(value: &Value, path: &str) -> Result<Message, EncodeError> {
    Ok(wrap(1, &schema(value, path)?))
}

/// `Definitions { repeated NamedSchema additional_properties = 1 }`.
fn definitions(value: &Value, path: &str) -> Result<Message, EncodeError> {
    named_map(value, path, 1, schema)
}

/// `Schema`.
fn schema(value: &Value, path: &str) -> Result<Message, EncodeError> {
    object(
        value,
        path,
        &[
            ("$ref", Field::Str(1)),
            ("format", Field::Str(2)),
            ("title", Field::Str(3)),
            ("description", Field::Str(4)),
            ("default", Field::Any(5)),
            ("multipleOf", Field::Double(6)),
            ("maximum", Field::Double(7)),
            ("exclusiveMaximum", Field::Bool(8)),
            ("minimum", Field::Double(9)),
            ("exclusiveMinimum", Field::Bool(10)),
            ("maxLength", Field::Int64(11)),
            ("minLength", Field::Int64(12)),
            ("pattern", Field::Str(13)),
            ("maxItems", Field::Int64(14)),
            ("minItems", Field::Int64(15)),
            ("uniqueItems", Field::Bool(16)),
            ("maxProperties", Field::Int64(17)),
            ("minProperties", Field::Int64(18)),
            ("required", Field::Strs(19)),
            ("enum", Field::Anys(20)),
            (
                "additionalProperties",
                Field::Sub(21, additional_properties),
            ),
            ("type", Field::Sub(22, type_item)),
            ("items", Field::Sub(23, items_item)),
            ("allOf", Field::Subs(24, schema)),
            ("properties", Field::Sub(25, properties)),
            ("discriminator", Field::Str(26)),
            ("readOnly", Field::Bool(27)),
            ("example", Field::Any(30)),
        ],
        Some(31),
    )
}

/// `AdditionalPropertiesItem { oneof { Schema schema = 1; bool boolean = 2 } }`.
fn additional_properties(value: &Value, path: &str) -> Result<Message, EncodeError> {
    let mut out = Message::default();
    match value {
        Value::Bool(allowed) => out.bool(2, *allowed),
        _ => out.message(1, &schema(value, path)?),
    }
    Ok(out)
}

/// `TypeItem { repeated string value = 1 }`: JSON has one type name or a list.
fn type_item(value: &Value, path: &str) -> Result<Message, EncodeError> {
    let mut out = Message::default();
    match value {
        Value::String(name) => out.string(1, name),
        Value::Array(names) => {
            for name in names {
                out.string(1, str_of(name, path)?);
            }
        }
        _ => return Err(error(path, "expected a type name")),
    }
    Ok(out)
}

/// `ItemsItem { repeated Schema schema = 1 }`.
fn items_item(value: &Value, path: &str) -> Result<Message, EncodeError> {
    let mut out = Message::default();
    match value {
        Value::Array(schemas) => {
            for (i, item) in schemas.iter().enumerate() {
                out.message(1, &schema(item, &format!("{path}/{i}"))?);
            }
        }
        _ => out.message(1, &schema(value, path)?),
    }
    Ok(out)
}

/// `Properties { repeated NamedSchema additional_properties = 1 }`.
fn properties(value: &Value, path: &str) -> Result<Message, EncodeError> {
    named_map(value, path, 1, schema)
}

/// Encodes a Swagger 2.0 document as `openapi.v2.Document`.
pub fn encode(doc: &Value) -> Result<Vec<u8>, EncodeError> {
    Ok(document(doc, "")?.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A minimal wire-format reader: (field, wire type, payload) triples, enough to walk what
    /// the encoder wrote.
    fn fields(mut bytes: &[u8]) -> Vec<(u32, u8, Vec<u8>)> {
        fn varint(bytes: &mut &[u8]) -> u64 {
            let mut value = 0u64;
            let mut shift = 0;
            loop {
                let byte = bytes[0];
                *bytes = &bytes[1..];
                value |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    return value;
                }
                shift += 7;
            }
        }
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let key = varint(&mut bytes);
            let (field, wire) = ((key >> 3) as u32, (key & 7) as u8);
            let payload = match wire {
                VARINT => varint(&mut bytes).to_le_bytes().to_vec(),
                FIXED64 => {
                    let (head, tail) = bytes.split_at(8);
                    bytes = tail;
                    head.to_vec()
                }
                LEN => {
                    let len = varint(&mut bytes) as usize;
                    let (head, tail) = bytes.split_at(len);
                    bytes = tail;
                    head.to_vec()
                }
                other => panic!("wire type {other}"),
            };
            out.push((field, wire, payload));
        }
        out
    }

    fn field(bytes: &[u8], number: u32) -> Vec<Vec<u8>> {
        fields(bytes)
            .into_iter()
            .filter(|(f, _, _)| *f == number)
            .map(|(_, _, p)| p)
            .collect()
    }

    fn text(bytes: &[u8]) -> String {
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn varints_as_protobuf_writes_them() {
        let cases: [(u64, &[u8]); 4] = [
            (0, &[0]),
            (1, &[1]),
            (300, &[0xac, 0x02]),
            (
                u64::MAX,
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            ),
        ];
        for (value, want) in cases {
            let mut m = Message::default();
            m.varint(value);
            assert_eq!(m.0, want, "{value}");
        }
        let mut m = Message::default();
        m.int64(11, -1);
        assert_eq!(m.0.len(), 1 + 10, "negative int64 takes ten bytes");
    }

    #[test]
    fn document_fields_land_on_gnostic_numbers() {
        let doc = json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": "v1.33.0"},
            "paths": {"/api/v1/nodes/{name}": {
                "parameters": [{"name": "name", "in": "path", "required": true, "type": "string"}],
                "patch": {
                    "operationId": "patchNode",
                    "parameters": [{"name": "dryRun", "in": "query", "type": "string"}],
                    "responses": {"200": {"description": "OK", "schema": {"$ref": "#/definitions/N"}}},
                    "x-kubernetes-group-version-kind": {"group": "", "version": "v1", "kind": "Node"},
                },
            }},
            "definitions": {"N": {
                "type": "object",
                "required": ["spec"],
                "properties": {"ports": {"type": "array", "items": {"type": "integer", "format": "int32"},
                                         "maxItems": 3, "x-kubernetes-patch-merge-key": "port"}},
                "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "Node"}],
            }},
        });
        let bytes = encode(&doc).unwrap();
        assert_eq!(text(&field(&bytes, 1)[0]), "2.0");
        let info = &field(&bytes, 2)[0];
        assert_eq!(text(&field(info, 1)[0]), "Kubernetes");
        assert_eq!(text(&field(info, 2)[0]), "v1.33.0");

        // Document.paths(8).path(2) → NamedPathItem{name 1, PathItem 2}
        let named_path = &field(&field(&bytes, 8)[0], 2)[0];
        assert_eq!(text(&field(named_path, 1)[0]), "/api/v1/nodes/{name}");
        let item = &field(named_path, 2)[0];
        // PathItem.parameters(9) → ParametersItem.parameter(1).non_body(2).path(4).name(4)
        let path_param = &field(&field(&field(&field(item, 9)[0], 1)[0], 2)[0], 4)[0];
        assert_eq!(text(&field(path_param, 4)[0]), "name");
        let patch = &field(item, 8)[0];
        assert_eq!(text(&field(patch, 5)[0]), "patchNode");
        let query = &field(&field(&field(&field(patch, 8)[0], 1)[0], 2)[0], 3)[0];
        assert_eq!(text(&field(query, 4)[0]), "dryRun");
        // Operation vendor extension (13) → NamedAny{name, Any{yaml 2}}
        let extension = &field(patch, 13)[0];
        assert_eq!(
            text(&field(extension, 1)[0]),
            "x-kubernetes-group-version-kind"
        );
        let yaml = text(&field(&field(extension, 2)[0], 2)[0]);
        assert_eq!(
            serde_json::from_str::<Value>(&yaml).unwrap()["kind"],
            "Node",
            "JSON text is the YAML kubectl parses"
        );
        // Responses(9).response_code(1) → NamedResponseValue{"200", ResponseValue{Response{…}}}
        let code = &field(&field(patch, 9)[0], 1)[0];
        assert_eq!(text(&field(code, 1)[0]), "200");
        let response = &field(&field(code, 2)[0], 1)[0];
        assert_eq!(text(&field(response, 1)[0]), "OK");

        // Document.definitions(9) → NamedSchema{name 1, Schema 2}
        let named_schema = &field(&field(&bytes, 9)[0], 1)[0];
        assert_eq!(text(&field(named_schema, 1)[0]), "N");
        let schema = &field(named_schema, 2)[0];
        assert_eq!(text(&field(&field(schema, 22)[0], 1)[0]), "object");
        assert_eq!(text(&field(schema, 19)[0]), "spec");
        let gvk = &field(schema, 31)[0];
        assert_eq!(text(&field(gvk, 1)[0]), "x-kubernetes-group-version-kind");
        // Schema.properties(25) → NamedSchema{"ports", Schema{type array, items, maxItems}}
        let ports = &field(&field(schema, 25)[0], 1)[0];
        assert_eq!(text(&field(ports, 1)[0]), "ports");
        let ports = &field(ports, 2)[0];
        assert_eq!(text(&field(&field(ports, 22)[0], 1)[0]), "array");
        assert_eq!(field(ports, 14)[0][0], 3, "maxItems");
        let items = &field(&field(ports, 23)[0], 1)[0];
        assert_eq!(text(&field(items, 2)[0]), "int32");
        let merge_key = &field(ports, 31)[0];
        assert_eq!(text(&field(&field(merge_key, 2)[0], 2)[0]), "\"port\"");
    }

    #[test]
    fn unknown_keys_are_errors_not_losses() {
        let cases = [
            (json!({"swagger": "2.0", "bogus": 1}), "/bogus"),
            (
                json!({"definitions": {"A": {"nullable": true}}}),
                "/definitions/A/nullable",
            ),
            (
                json!({"definitions": {"A": {"maxItems": "3"}}}),
                "/definitions/A/maxItems",
            ),
            (
                json!({"paths": {"/p": {"get": {"parameters": [{"name": "h", "in": "header"}]}}}}),
                "/paths/~p/get/parameters/0",
            ),
        ];
        for (doc, want) in cases {
            let err = encode(&doc).unwrap_err();
            assert_eq!(err.path, want.replace("~p", "/p"), "{doc}");
        }
    }
}

//! Seeded, replayable fuzz suite for the server's request decoding, over real HTTP.
//!
//! # How to run
//!
//! - CI: `kt -p kube-lb-apiserver -E 'test(fuzz)'` (a few seconds).
//! - Longer: `KUBE_LB_FUZZ_SECS=600 kt -p kube-lb-apiserver -E 'test(fuzz)'`.
//! - Replay: a run prints `KUBE_LB_FUZZ_SEED=<n>`; a failure prints the seed and the case count,
//!   and `KUBE_LB_FUZZ_SEED=<n> KUBE_LB_FUZZ_CASES=<count>` replays the same requests in the
//!   same order against a fresh server. Each case draws from its own generator
//!   (seed, case index), so a case does not change when the generator of another one does.
//!
//! # Why a structure-aware generator rather than `cargo fuzz`
//!
//! `cargo fuzz` needs nightly, which cannot be installed here. More to the point, the decoding
//! states worth reaching sit behind structure: a body must be a well-formed Service (or Lease,
//! EndpointSlice, Node) with exactly one field of the wrong type, a JSON patch whose `copy`
//! operations double the document, an apply configuration whose aliases expand. Random bytes
//! almost never get past the JSON parser; this generator starts from valid objects and breaks
//! one thing at a time (then also bytes: truncation, flips, invalid UTF-8, deep nesting, bodies
//! over the size limit). The committed corpus (`tests/fuzz/corpus/apiserver/*.yaml`) is
//! replayed first on every run, and a failing case is shrunk (object members and list items
//! removed, text halved) while it still fails, before it is printed.
//!
//! # Properties
//!
//! Never a 5xx (but the one kube-apiserver itself answers: a server-side apply naming a field the
//! kind does not have, kubernetes#122480) and never a dropped connection for any body; every error is a `kind: Status` whose
//! `code` is the HTTP status; a body with one wrong-typed field is refused (4xx) naming that
//! field path in the message or a cause; whatever the server accepts decodes into the typed
//! k8s-openapi object, and so does every list afterwards (no poisoned store); every request
//! answers within a time ceiling.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_lb_apiserver::ApiServer;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

/// Ceiling of one request (debug build on a shared machine; a 3 MiB body parses in well under
/// a second).
const REQUEST_CEILING: Duration = Duration::from_secs(10);

/// The kinds kube-lb reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Service,
    EndpointSlice,
    Node,
    Lease,
}

const KINDS: [Kind; 4] = [Kind::Service, Kind::EndpointSlice, Kind::Node, Kind::Lease];

impl Kind {
    fn collection(self) -> &'static str {
        match self {
            Kind::Service => "/api/v1/namespaces/default/services",
            Kind::EndpointSlice => "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
            Kind::Node => "/api/v1/nodes",
            Kind::Lease => "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
        }
    }

    fn base(self) -> Value {
        match self {
            Kind::Service => json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"},
                             "annotations": {"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}},
                "spec": {
                    "type": "LoadBalancer",
                    "selector": {"app": "web"},
                    "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
                    "externalTrafficPolicy": "Local",
                    "loadBalancerSourceRanges": ["10.0.0.0/8"],
                    "allocateLoadBalancerNodePorts": true,
                    "sessionAffinity": "ClientIP",
                    "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10}},
                },
            }),
            Kind::EndpointSlice => json!({
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {"name": "web-abc", "namespace": "default",
                             "labels": {"kubernetes.io/service-name": "web"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.1.0.1"],
                               "conditions": {"ready": true, "serving": true, "terminating": false},
                               "nodeName": "n1", "zone": "a"}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            }),
            Kind::Node => json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "a"}},
                "spec": {"podCIDR": "10.244.0.0/24", "unschedulable": false,
                         "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
                "status": {
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                    "conditions": [{"type": "Ready", "status": "True",
                                    "lastHeartbeatTime": "2024-01-01T00:00:00Z",
                                    "lastTransitionTime": "2024-01-01T00:00:00Z"}],
                },
            }),
            Kind::Lease => json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "kube-lb", "namespace": "kube-system"},
                "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15,
                         "acquireTime": "2024-01-01T00:00:00.000000Z",
                         "renewTime": "2024-01-01T00:00:00.000000Z", "leaseTransitions": 1},
            }),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Service => "web",
            Kind::EndpointSlice => "web-abc",
            Kind::Node => "n1",
            Kind::Lease => "kube-lb",
        }
    }

    fn has_status(self) -> bool {
        matches!(self, Kind::Service | Kind::Node)
    }

    /// Decodes an object as kube-rs would.
    fn decode(self, value: &Value) -> Result<(), String> {
        let v = value.clone();
        match self {
            Kind::Service => serde_json::from_value::<Service>(v).map(drop),
            Kind::EndpointSlice => serde_json::from_value::<EndpointSlice>(v).map(drop),
            Kind::Node => serde_json::from_value::<Node>(v).map(drop),
            Kind::Lease => serde_json::from_value::<Lease>(v).map(drop),
        }
        .map_err(|e| e.to_string())
    }

    fn parse(name: &str) -> Option<Kind> {
        KINDS.into_iter().find(|k| format!("{k:?}") == name)
    }
}

/// The request verbs exercised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Post,
    Put,
    PutStatus,
    Merge,
    Strategic,
    JsonPatch,
    Apply,
    MergeStatus,
}

const VERBS: [Verb; 8] = [
    Verb::Post,
    Verb::Put,
    Verb::PutStatus,
    Verb::Merge,
    Verb::Strategic,
    Verb::JsonPatch,
    Verb::Apply,
    Verb::MergeStatus,
];

impl Verb {
    fn content_type(self) -> &'static str {
        match self {
            Verb::Post | Verb::Put | Verb::PutStatus => "application/json",
            Verb::Merge | Verb::MergeStatus => "application/merge-patch+json",
            Verb::Strategic => "application/strategic-merge-patch+json",
            Verb::JsonPatch => "application/json-patch+json",
            Verb::Apply => "application/apply-patch+yaml",
        }
    }

    fn parse(name: &str) -> Option<Verb> {
        VERBS.into_iter().find(|v| format!("{v:?}") == name)
    }
}

/// A request body: a JSON value (shrinkable by structure) or raw bytes.
#[derive(Debug, Clone)]
enum Body {
    Json(Value),
    Yaml(Value),
    Raw(Vec<u8>),
}

impl Body {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Body::Json(v) => serde_json::to_vec(v).unwrap(),
            Body::Yaml(v) => serde_yaml_ng::to_string(v).unwrap().into_bytes(),
            Body::Raw(b) => b.clone(),
        }
    }
}

/// One request and what it must produce beyond the general properties.
#[derive(Debug, Clone)]
struct Case {
    kind: Kind,
    verb: Verb,
    body: Body,
    /// A field made wrong-typed: the answer must be a 4xx naming it (as a path, or as the JSON
    /// pointer when a JSON patch cannot even reach it).
    field: Option<(String, String)>,
    /// Why this case exists, for the failure message.
    what: String,
}

/// The value a JSON path (`spec.ports[0].port`) names, as collected from the base object.
#[derive(Debug, Clone)]
struct Leaf {
    path: String,
    pointer: String,
    value: Value,
}

fn leaves(value: &Value, path: &str, pointer: &str, out: &mut Vec<Leaf>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let in_map = matches!(
                    path.rsplit('.').next(),
                    Some("labels" | "annotations" | "selector")
                );
                let child_path = if in_map {
                    format!("{path}[{key}]")
                } else if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                let child_pointer =
                    format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1"));
                leaves(child, &child_path, &child_pointer, out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                leaves(
                    child,
                    &format!("{path}[{i}]"),
                    &format!("{pointer}/{i}"),
                    out,
                );
            }
        }
        _ => out.push(Leaf {
            path: path.to_owned(),
            pointer: pointer.to_owned(),
            value: value.clone(),
        }),
    }
}

/// A value of another JSON type than `old` (never null: null means unset and is fine).
fn wrong_type(rng: &mut StdRng, leaf: &Leaf) -> Value {
    let is_time = leaf.path.ends_with("Time") || leaf.path.ends_with("Timestamp");
    loop {
        let candidate = match rng.random_range(0..9) {
            0 => json!("80"),
            1 => json!(80),
            2 => json!(true),
            3 => json!(1.5),
            4 => json!({"a": 1}),
            5 => json!(["x"]),
            6 => json!(4_294_967_296u64),
            7 => json!(-1e300),
            _ => json!("not a time"),
        };
        let differs = std::mem::discriminant(&candidate) != std::mem::discriminant(&leaf.value);
        // IntOrString takes both; an out-of-range number is wrong for an int32 field.
        let int_or_string = leaf.path.ends_with("targetPort");
        let accepted_by_type = match (&leaf.value, &candidate) {
            (Value::Number(_), Value::Number(n)) => {
                n.as_i64().is_some_and(|n| i32::try_from(n).is_ok())
            }
            (Value::String(_), Value::String(s)) => !(is_time && s == "not a time"),
            _ => !differs,
        } || (int_or_string
            && (candidate.is_string()
                || candidate.as_i64().is_some_and(|n| i32::try_from(n).is_ok())));
        if !accepted_by_type {
            return candidate;
        }
    }
}

fn random_string(rng: &mut StdRng) -> String {
    const ODD: &[&str] = &[
        "",
        " ",
        "\u{0}",
        "\u{202e}x",
        "🚀",
        "e\u{301}",
        "\r\n",
        "\u{1b}[0m",
        "\\",
        "\"",
        "{",
        "[",
        "null",
        "true",
        "9999999999999999999999",
    ];
    match rng.random_range(0..4) {
        0 => ODD.choose(rng).copied().unwrap_or("").to_owned(),
        1 => "a".repeat(rng.random_range(1..300_000)),
        2 => (0..rng.random_range(0..40))
            .map(|_| char::from_u32(rng.random_range(0..0x2_0000)).unwrap_or('x'))
            .collect(),
        _ => format!("x{}", rng.random::<u32>()),
    }
}

fn random_value(rng: &mut StdRng, depth: usize) -> Value {
    match rng.random_range(0..if depth > 3 { 6 } else { 9 }) {
        0 => Value::Null,
        1 => json!(rng.random_bool(0.5)),
        2 => json!(rng.random::<i64>()),
        3 => json!(rng.random::<f64>() * 1e10),
        4 => json!(u64::MAX),
        5 => Value::String(random_string(rng)),
        6 => Value::Array(
            (0..rng.random_range(0..5))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        7 => {
            let mut nested = json!(1);
            for _ in 0..rng.random_range(1..140) {
                nested = json!([nested]);
            }
            nested
        }
        _ => Value::Object(
            (0..rng.random_range(0..5))
                .map(|i| (format!("k{i}"), random_value(rng, depth + 1)))
                .collect(),
        ),
    }
}

/// Pointers of every node (not only leaves) of `value`.
fn pointers(value: &Value, pointer: &str, out: &mut Vec<String>) {
    out.push(pointer.to_owned());
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                pointers(
                    child,
                    &format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                pointers(child, &format!("{pointer}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// One to four structural mutations anywhere in the object.
fn mutate(rng: &mut StdRng, object: &mut Value) {
    for _ in 0..rng.random_range(1..=4) {
        let mut all = Vec::new();
        pointers(object, "", &mut all);
        let Some(pointer) = all.choose(rng).cloned() else {
            return;
        };
        let replacement = random_value(rng, 0);
        let Some(node) = object.pointer_mut(&pointer) else {
            continue;
        };
        match rng.random_range(0..5) {
            0 => *node = replacement,
            1 => {
                if let Value::Object(map) = node {
                    map.insert(random_string(rng).chars().take(40).collect(), replacement);
                }
            }
            2 => {
                if let Value::Array(items) = node
                    && let Some(first) = items.first().cloned()
                {
                    let copies = rng.random_range(1..5000);
                    items.extend(std::iter::repeat_n(first, copies));
                }
            }
            3 => {
                if let Value::Object(map) = node
                    && let Some(key) = map.keys().next().cloned()
                {
                    map.remove(&key);
                }
            }
            _ => *node = Value::Null,
        }
    }
}

/// Text-level damage of a serialized body.
fn damage(rng: &mut StdRng, mut bytes: Vec<u8>) -> Vec<u8> {
    match rng.random_range(0..7) {
        0 => {
            let cut = rng.random_range(0..=bytes.len());
            bytes.truncate(cut);
        }
        1 => {
            if !bytes.is_empty() {
                let at = rng.random_range(0..bytes.len());
                bytes[at] ^= 1 << rng.random_range(0..8);
            }
        }
        2 => {
            let at = rng.random_range(0..=bytes.len());
            bytes.splice(at..at, [0xff, 0xfe, 0xc3]);
        }
        3 => {
            // Deep nesting around the whole body, far past any parser's limit.
            let depth = rng.random_range(100..200_000);
            let mut deep = "[".repeat(depth).into_bytes();
            deep.extend_from_slice(&bytes);
            deep.extend(std::iter::repeat_n(b']', depth));
            bytes = deep;
        }
        4 => {
            let depth = rng.random_range(100..100_000);
            let mut deep = Vec::new();
            for _ in 0..depth {
                deep.extend_from_slice(b"{\"a\":");
            }
            deep.extend_from_slice(b"1");
            deep.extend(std::iter::repeat_n(b'}', depth));
            bytes = deep;
        }
        5 => {
            // Duplicate keys: the last one wins in Go and serde_json alike.
            let text = String::from_utf8_lossy(&bytes).replacen("{", "{\"spec\":7,", 1);
            bytes = text.into_bytes();
        }
        _ => bytes = Vec::new(),
    }
    bytes
}

/// YAML a hostile apply client might send.
fn hostile_yaml(rng: &mut StdRng, kind: Kind) -> Vec<u8> {
    let head = format!(
        "apiVersion: {}\nkind: {kind:?}\nmetadata:\n  name: {}\n",
        kind.base()["apiVersion"].as_str().unwrap_or("v1"),
        kind.name()
    );
    let tail = match rng.random_range(0..6) {
        0 => {
            // Billion laughs, nine levels of ten.
            let mut text = String::from("  annotations:\n    l0: &l0 \"lol\"\n");
            for level in 1..10 {
                let refs = vec![format!("*l{}", level - 1); 10].join(", ");
                text.push_str(&format!("    l{level}: &l{level} [{refs}]\n"));
            }
            text
        }
        1 => {
            // One big anchored list referenced many times: within serde_yaml_ng's repetition
            // limit, quadratic without the server's budget.
            let items = rng.random_range(100..3000);
            let refs = rng.random_range(100..30_000);
            format!(
                "spec:\n  a: &a [{}]\n  b: [{}]\n",
                vec!["x"; items].join(","),
                vec!["*a"; refs].join(",")
            )
        }
        2 => format!("spec:\n  x: {}1{}\n", "[".repeat(5000), "]".repeat(5000)),
        3 => "spec: !!binary aGVsbG8=\n".to_owned(),
        4 => "spec: {}\n---\nspec: {}\n".to_owned(),
        _ => "spec:\n  ports: [{port: .nan}, {port: 0x50}, {port: 1e400}]\n".to_owned(),
    };
    format!("{head}{tail}").into_bytes()
}

/// A JSON patch: a list of operations on the base object's pointers, valid or not.
fn json_patch_ops(rng: &mut StdRng, kind: Kind) -> Value {
    let base = kind.base();
    let mut all = Vec::new();
    pointers(&base, "", &mut all);
    let mut ops = Vec::new();
    for _ in 0..rng.random_range(1..6) {
        let path = all.choose(rng).cloned().unwrap_or_default();
        let op = match rng.random_range(0..8) {
            0 => json!({"op": "add", "path": format!("{path}/-"), "value": random_value(rng, 0)}),
            1 => json!({"op": "replace", "path": path, "value": random_value(rng, 0)}),
            2 => json!({"op": "remove", "path": path}),
            3 => json!({"op": "copy", "from": path, "path": "/metadata/annotations/c"}),
            4 => json!({"op": "move", "from": path, "path": format!("{path}/x")}),
            5 => json!({"op": "test", "path": path, "value": random_value(rng, 0)}),
            6 => json!({"op": random_string(rng), "path": random_string(rng)}),
            _ => random_value(rng, 0),
        };
        ops.push(op);
    }
    if rng.random_bool(0.1) {
        // Copy amplification: each copy doubles the document.
        ops = (0..rng.random_range(10..40))
            .map(|i| json!({"op": "copy", "from": "/spec", "path": format!("/spec/c{i}")}))
            .collect();
    }
    Value::Array(ops)
}

/// The body of `verb` carrying `object` (a full or partial object).
fn body_for(verb: Verb, object: Value) -> Body {
    match verb {
        Verb::Apply => Body::Yaml(object),
        _ => Body::Json(object),
    }
}

fn generate(rng: &mut StdRng) -> Case {
    let kind = *KINDS.choose(rng).unwrap();
    let mut verb = *VERBS.choose(rng).unwrap();
    if !kind.has_status() && matches!(verb, Verb::PutStatus | Verb::MergeStatus) {
        verb = Verb::Put;
    }
    let base = kind.base();
    match rng.random_range(0..10) {
        // One wrong-typed field: must be refused naming it.
        0..=3 => {
            let mut found = Vec::new();
            leaves(&base, "", "", &mut found);
            let leaf = found.choose(rng).cloned().unwrap();
            let bad = wrong_type(rng, &leaf);
            let body = if verb == Verb::JsonPatch {
                Body::Json(json!([{"op": "replace", "path": leaf.pointer, "value": bad}]))
            } else {
                let mut object = base.clone();
                *object.pointer_mut(&leaf.pointer).unwrap() = bad.clone();
                body_for(verb, object)
            };
            Case {
                kind,
                verb,
                body,
                field: Some((leaf.path.clone(), leaf.pointer.clone())),
                what: format!("{} set to {bad}", leaf.path),
            }
        }
        4..=6 => {
            let body = if verb == Verb::JsonPatch {
                Body::Json(json_patch_ops(rng, kind))
            } else {
                let mut object = base.clone();
                mutate(rng, &mut object);
                body_for(verb, object)
            };
            Case {
                kind,
                verb,
                body,
                field: None,
                what: "structural mutations".to_owned(),
            }
        }
        7 => {
            let verb = if rng.random_bool(0.5) {
                Verb::Apply
            } else {
                verb
            };
            let body = if verb == Verb::Apply {
                Body::Raw(hostile_yaml(rng, kind))
            } else {
                Body::Raw(damage(rng, serde_json::to_vec(&base).unwrap()))
            };
            Case {
                kind,
                verb,
                body,
                field: None,
                what: "hostile text".to_owned(),
            }
        }
        8 => {
            // Over the 3 MiB limit, or just under it.
            let size = rng.random_range(2_500_000..4_000_000);
            let mut object = base.clone();
            object["metadata"]["annotations"] = json!({"big": "a".repeat(size)});
            Case {
                kind,
                verb,
                body: body_for(verb, object),
                field: None,
                what: format!("{size}-byte annotation"),
            }
        }
        _ => {
            let body = Body::Raw(damage(rng, body_for(verb, base).bytes()));
            Case {
                kind,
                verb,
                body,
                field: None,
                what: "damaged body".to_owned(),
            }
        }
    }
}

/// The one 500 kube-apiserver answers on purpose for a client's body: server-side apply of a
/// configuration with a field the kind does not declare (structured-merge-diff's typed
/// conversion error, passed on as a plain error; kubernetes#122480).
fn upstream_server_error(verb: Verb, code: u16, body: &[u8]) -> bool {
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|status| status["message"].as_str().map(str::to_string))
        .unwrap_or_default();
    verb == Verb::Apply
        && code == 500
        && message.starts_with("failed to create typed patch object")
        && message.contains("field not declared in schema")
}

/// Sends one case; `Err` describes a violated property.
async fn run_case(
    http: &reqwest::Client,
    url: &str,
    case: &Case,
    serial: u64,
) -> Result<(), String> {
    let kind = case.kind;
    let object_url = format!("{url}{}/{}", kind.collection(), kind.name());
    let (method, target) = match case.verb {
        Verb::Post => (reqwest::Method::POST, format!("{url}{}", kind.collection())),
        Verb::Put => (reqwest::Method::PUT, object_url),
        Verb::PutStatus => (reqwest::Method::PUT, format!("{object_url}/status")),
        Verb::MergeStatus => (reqwest::Method::PATCH, format!("{object_url}/status")),
        Verb::Apply => (
            reqwest::Method::PATCH,
            format!("{object_url}?fieldManager=fuzz&force=true"),
        ),
        _ => (reqwest::Method::PATCH, object_url),
    };
    let mut body = case.body.clone();
    if case.verb == Verb::Post
        && let Body::Json(object) = &mut body
        && object["metadata"]["name"].is_string()
    {
        // A fresh name, so creates are not all 409s.
        object["metadata"]["name"] = json!(format!("{}-{serial}", kind.name()));
    }
    let started = Instant::now();
    let response = http
        .request(method, &target)
        .header("content-type", case.verb.content_type())
        .body(body.bytes())
        .send()
        .await
        .map_err(|e| format!("[no answer] {e}"))?;
    let code = response.status().as_u16();
    let bytes = response
        .bytes()
        .await
        .map_err(|e| format!("[cut off] {e}"))?;
    let took = started.elapsed();
    if took > REQUEST_CEILING {
        return Err(format!(
            "[slow] answered after {took:?} (ceiling {REQUEST_CEILING:?})"
        ));
    }
    if code >= 500 && !upstream_server_error(case.verb, code, &bytes) {
        return Err(format!(
            "[5xx] HTTP {code}: {}",
            String::from_utf8_lossy(&bytes)
        ));
    }
    let answer: Value = serde_json::from_slice(&bytes).map_err(|e| {
        format!(
            "[not json] HTTP {code} with a body that is not JSON ({e}): {}",
            clip(&String::from_utf8_lossy(&bytes))
        )
    })?;
    if code >= 400 {
        if answer["kind"] != "Status" || answer["code"] != code || !answer["message"].is_string() {
            return Err(format!(
                "[no status] HTTP {code} without a proper Status: {}",
                clip(&answer.to_string())
            ));
        }
        if let Some((field, pointer)) = &case.field {
            let message = answer["message"].as_str().unwrap_or_default();
            let causes = answer["details"]["causes"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let named = without_indices(message).contains(&without_indices(field))
                || (case.verb == Verb::JsonPatch && message.contains(pointer.as_str()))
                // A patch that does not apply: kube's fixed message, the path in its cause.
                || (case.verb == Verb::JsonPatch
                    && causes.iter().any(|c| {
                        c["message"]
                            .as_str()
                            .is_some_and(|m| m.contains(pointer.as_str()))
                    }))
                || causes.iter().any(|c| {
                    c["field"]
                        .as_str()
                        .is_some_and(|f| without_indices(f) == without_indices(field))
                });
            if !named {
                return Err(format!(
                    "[unnamed] HTTP {code} does not name {field}: {}",
                    clip(&answer.to_string())
                ));
            }
        }
        return Ok(());
    }
    if let Some((field, _)) = &case.field {
        return Err(format!(
            "[accepted] HTTP {code} with {field} of the wrong type"
        ));
    }
    kind.decode(&answer).map_err(|e| {
        format!("[undecodable] HTTP {code}: accepted an object kube-rs cannot decode: {e}")
    })
}

/// Strips list indices: a strategic merge or apply may move the bad element to another index.
fn without_indices(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '[' {
            let rest: String = chars.clone().take_while(|c| *c != ']').collect();
            if !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit()) {
                for _ in 0..=rest.len() {
                    chars.next();
                }
                continue;
            }
        }
        out.push(c);
    }
    out
}

fn clip(text: &str) -> String {
    const MAX: usize = 2000;
    if text.len() <= MAX {
        return text.to_owned();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

/// Lists every kind and decodes each item as kube-rs would: nothing the server accepted may
/// break a typed list or watch.
async fn check_lists(http: &reqwest::Client, url: &str) -> Result<(), String> {
    for kind in KINDS {
        let list: Value = http
            .get(format!("{url}{}", kind.collection()))
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        for item in list["items"].as_array().cloned().unwrap_or_default() {
            kind.decode(&item).map_err(|e| {
                format!(
                    "[poisoned] stored {kind:?} does not decode ({e}): {}",
                    clip(&item.to_string())
                )
            })?;
        }
    }
    Ok(())
}

/// The `[category]` a failure message starts with.
fn category(why: &str) -> &str {
    why.split(']').next().unwrap_or_default()
}

/// Removes members and items, or halves text, while the case still fails the same way. A
/// wrong-typed-field case is already minimal (one field), so it is left as it is.
async fn shrink(
    http: &reqwest::Client,
    url: &str,
    mut case: Case,
    why: &str,
    serial: &mut u64,
) -> Case {
    if case.field.is_some() {
        return case;
    }
    let mut attempts = 0;
    loop {
        let mut smaller = None;
        for candidate in smaller_bodies(&case.body) {
            attempts += 1;
            if attempts > 300 {
                return case;
            }
            *serial += 1;
            let trial = Case {
                body: candidate,
                ..case.clone()
            };
            let result = run_case(http, url, &trial, *serial).await;
            if result.is_err_and(|e| category(&e) == category(why)) {
                smaller = Some(trial);
                break;
            }
        }
        match smaller {
            Some(trial) => case = trial,
            None => return case,
        }
    }
}

fn smaller_bodies(body: &Body) -> Vec<Body> {
    match body {
        Body::Json(v) | Body::Yaml(v) => {
            let wrap = |v: Value| match body {
                Body::Yaml(_) => Body::Yaml(v),
                _ => Body::Json(v),
            };
            let mut all = Vec::new();
            pointers(v, "", &mut all);
            all.into_iter()
                .skip(1)
                .filter_map(|pointer| {
                    let (parent, last) = pointer.rsplit_once('/')?;
                    let mut copy = v.clone();
                    match copy.pointer_mut(parent)? {
                        Value::Object(map) => {
                            map.remove(&last.replace("~1", "/").replace("~0", "~"));
                        }
                        Value::Array(items) => {
                            let i: usize = last.parse().ok()?;
                            items.remove(i);
                        }
                        _ => return None,
                    }
                    Some(wrap(copy))
                })
                .collect()
        }
        Body::Raw(bytes) if bytes.len() > 1 => {
            let half = bytes.len() / 2;
            vec![
                Body::Raw(bytes[..half].to_vec()),
                Body::Raw(bytes[half..].to_vec()),
            ]
        }
        Body::Raw(_) => Vec::new(),
    }
}

/// Committed cases: `tests/fuzz/corpus/apiserver/*.yaml`, each a list of
/// `{kind, verb, body (text), repeat?, nest?, field?, what}`: `repeat` repeats the body text,
/// `nest` wraps it in that many JSON lists (so huge inputs stay small in the file).
fn load_corpus() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fuzz/corpus/apiserver");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for file in files {
        let entries: Vec<Value> = serde_yaml_ng::from_str(&std::fs::read_to_string(&file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for entry in entries {
            let kind = entry["kind"].as_str().and_then(Kind::parse).unwrap();
            let verb = entry["verb"].as_str().and_then(Verb::parse).unwrap();
            let repeat = entry["repeat"].as_u64().unwrap_or(1) as usize;
            let nest = entry["nest"].as_u64().unwrap_or(0) as usize;
            let text = format!(
                "{}{}{}",
                "[".repeat(nest),
                entry["body"].as_str().unwrap().repeat(repeat),
                "]".repeat(nest)
            );
            cases.push(Case {
                kind,
                verb,
                body: Body::Raw(text.into_bytes()),
                field: entry["field"].as_str().map(|path| {
                    let pointer = format!("/{}", path.replace(['.', '['], "/").replace(']', ""));
                    (path.to_owned(), pointer)
                }),
                what: format!(
                    "{}: {}",
                    file.display(),
                    entry["what"].as_str().unwrap_or("")
                ),
            });
        }
    }
    assert!(!cases.is_empty(), "empty corpus in {}", dir.display());
    cases
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|text| {
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number"))
    })
}

fn case_rng(seed: u64, index: u64) -> StdRng {
    StdRng::seed_from_u64(seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_apiserver_request_decoding() {
    // Under `CI=true` a fixed seed (1), so CI is reproducible; new seeds come from runs by hand.
    let in_ci = std::env::var_os("CI").is_some_and(|v| v == "true");
    let seed = env_u64("KUBE_LB_FUZZ_SEED").unwrap_or_else(|| {
        if in_ci {
            return 1;
        }
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    });
    let budget = std::env::var("KUBE_LB_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map_or(Duration::from_secs(3), Duration::from_secs_f64);
    let case_limit = env_u64("KUBE_LB_FUZZ_CASES");
    eprintln!(
        "fuzz_apiserver_request_decoding: KUBE_LB_FUZZ_SEED={seed} KUBE_LB_FUZZ_SECS={}",
        budget.as_secs_f64()
    );

    let server = ApiServer::builder().start().await.unwrap();
    let url = server.url();
    let http = reqwest::Client::builder()
        .timeout(REQUEST_CEILING * 2)
        .build()
        .unwrap();
    for kind in KINDS {
        let response = http
            .post(format!("{url}{}", kind.collection()))
            .json(&kind.base())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 201, "seeding {kind:?}");
    }

    let mut serial = 0u64;
    for case in load_corpus() {
        serial += 1;
        if let Err(why) = run_case(&http, &url, &case, serial).await {
            panic!(
                "corpus case {} ({:?} {:?}) failed: {why}",
                case.what, case.kind, case.verb
            );
        }
    }
    check_lists(&http, &url).await.unwrap();

    let started = Instant::now();
    let mut index = 0u64;
    loop {
        let done = match case_limit {
            Some(limit) => index >= limit,
            None => started.elapsed() >= budget,
        };
        if done {
            break;
        }
        let case = generate(&mut case_rng(seed, index));
        serial += 1;
        let mut result = run_case(&http, &url, &case, serial).await;
        if result.is_ok() && index % 64 == 63 {
            result = check_lists(&http, &url).await;
        }
        if let Err(why) = result {
            let minimal = shrink(&http, &url, case.clone(), &why, &mut serial).await;
            let body = String::from_utf8_lossy(&minimal.body.bytes()).into_owned();
            panic!(
                "case {index} ({:?} {:?}, {}) failed: {why}\nreplay: KUBE_LB_FUZZ_SEED={seed} \
                 KUBE_LB_FUZZ_CASES={}\nshrunk body: {}",
                case.kind,
                case.verb,
                case.what,
                index + 1,
                clip(&body)
            );
        }
        index += 1;
    }
    check_lists(&http, &url).await.unwrap();
    eprintln!(
        "fuzz_apiserver_request_decoding: {index} generated cases in {:?}, no failure",
        started.elapsed()
    );
    server.shutdown().await;
}

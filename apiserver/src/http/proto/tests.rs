// Test helpers may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use serde_json::json;

use super::*;

/// A protobuf writer for the tests' bodies, field by field.
#[derive(Default, Clone)]
struct Pb(Vec<u8>);

fn varint(out: &mut Vec<u8>, mut value: u64) {
    loop {
        #[allow(clippy::cast_possible_truncation)]
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

impl Pb {
    fn int(mut self, number: u64, value: i64) -> Self {
        varint(&mut self.0, number << 3);
        #[allow(clippy::cast_sign_loss)]
        varint(&mut self.0, value as u64);
        self
    }

    fn bytes(mut self, number: u64, value: &[u8]) -> Self {
        varint(&mut self.0, (number << 3) | 2);
        varint(&mut self.0, value.len() as u64);
        self.0.extend_from_slice(value);
        self
    }

    fn str(self, number: u64, value: &str) -> Self {
        self.bytes(number, value.as_bytes())
    }

    fn msg(self, number: u64, value: &Pb) -> Self {
        self.bytes(number, &value.0)
    }

    fn entry(self, number: u64, key: &str, value: &str) -> Self {
        self.msg(number, &Pb::default().str(1, key).str(2, value))
    }
}

/// The envelope a Go client writes: magic, then `runtime.Unknown`.
fn envelope(api_version: &str, kind: &str, raw: &Pb) -> Vec<u8> {
    let unknown = Pb::default()
        .msg(1, &Pb::default().str(1, api_version).str(2, kind))
        .msg(2, raw)
        .str(3, "")
        .str(4, "");
    [MAGIC, unknown.0.as_slice()].concat()
}

/// A Service as client-go writes one: every non-pointer string written, even when empty.
fn service_bytes() -> Pb {
    let meta = Pb::default()
        .str(1, "web")
        .str(2, "")
        .str(3, "default")
        .int(7, 0)
        .msg(8, &Pb::default())
        .entry(11, "app", "web");
    let http = Pb::default()
        .str(1, "http")
        .str(2, "TCP")
        .int(3, 80)
        .msg(4, &Pb::default().int(1, 1).int(2, 0).str(3, "web"))
        .int(5, 0);
    let metrics = Pb::default()
        .str(1, "metrics")
        .str(2, "UDP")
        .int(3, 9090)
        .msg(4, &Pb::default().int(1, 0).int(2, 9091))
        .int(5, 0);
    let spec = Pb::default()
        .msg(1, &http)
        .msg(1, &metrics)
        .entry(2, "app", "web")
        .str(3, "")
        .str(4, "LoadBalancer")
        .str(11, "")
        .int(12, 0)
        .int(13, 0)
        .int(20, 0);
    let status = Pb::default().msg(1, &Pb::default());
    Pb::default().msg(1, &meta).msg(2, &spec).msg(3, &status)
}

#[test]
fn a_service_reads_as_the_json_a_go_client_would_send() {
    let object = decode(&envelope("v1", "Service", &service_bytes())).unwrap();
    assert_eq!(
        object,
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "web",
                "namespace": "default",
                "labels": {"app": "web"},
                // A zero metav1.Time is written as null, omitempty or not.
                "creationTimestamp": null,
            },
            "spec": {
                "ports": [
                    {"name": "http", "protocol": "TCP", "port": 80, "targetPort": "web"},
                    {"name": "metrics", "protocol": "UDP", "port": 9090, "targetPort": 9091},
                ],
                "selector": {"app": "web"},
                "type": "LoadBalancer",
                // A pointer set to false stays: it is not the same as unset.
                "allocateLoadBalancerNodePorts": false,
            },
            "status": {"loadBalancer": {}},
        })
    );
}

#[test]
fn unset_pointers_are_left_out_and_set_ones_kept_even_at_zero() {
    let endpoint = |ready: Option<bool>| {
        let mut conditions = Pb::default();
        if let Some(ready) = ready {
            conditions = conditions.int(1, i64::from(ready));
        }
        Pb::default().str(1, "10.0.0.1").msg(2, &conditions)
    };
    let slice = Pb::default()
        .msg(1, &Pb::default().str(1, "web-abc").str(3, "default"))
        .msg(2, &endpoint(Some(false)))
        .msg(2, &endpoint(None))
        .str(4, "IPv4");
    let object = decode(&envelope("discovery.k8s.io/v1", "EndpointSlice", &slice)).unwrap();
    assert_eq!(
        object["endpoints"][0]["conditions"],
        json!({"ready": false})
    );
    assert_eq!(object["endpoints"][1]["conditions"], json!({}));
    assert_eq!(object["addressType"], "IPv4");
    // Neither `endpoints` nor `ports` has omitempty: an unsent one is null, as in Go's JSON.
    assert_eq!(object["ports"], Value::Null, "{object}");
}

#[test]
fn a_nil_slice_without_omitempty_reads_as_null() {
    let slice = Pb::default()
        .msg(1, &Pb::default().str(1, "empty"))
        .str(4, "IPv4");
    let object = decode(&envelope("discovery.k8s.io/v1", "EndpointSlice", &slice)).unwrap();
    assert_eq!(object["endpoints"], Value::Null, "{object}");
}

#[test]
fn config_map_bytes_are_base64_and_maps_keep_the_last_value_of_a_key() {
    let binary = Pb::default().str(1, "blob").bytes(2, &[0, 1, 2, 255]);
    let config = Pb::default()
        .msg(1, &Pb::default().str(1, "settings"))
        .entry(2, "mode", "old")
        .entry(2, "mode", "fast")
        .msg(3, &binary)
        .int(4, 1);
    let object = decode(&envelope("v1", "ConfigMap", &config)).unwrap();
    assert_eq!(object["data"], json!({"mode": "fast"}));
    assert_eq!(object["binaryData"], json!({"blob": "AAEC/w=="}));
    assert_eq!(object["immutable"], json!(true));
}

#[test]
fn times_are_rfc3339_in_utc_and_micro_times_keep_microseconds() {
    // 2026-11-27T04:00:00Z and 123456789 ns.
    let time = Pb::default().int(1, 1_795_752_000).int(2, 123_456_789);
    let lease = Pb::default()
        .msg(1, &Pb::default().str(1, "leader").msg(8, &time))
        .msg(
            2,
            &Pb::default()
                .str(1, "kube-lb-a")
                .int(2, 15)
                .msg(3, &time)
                .msg(4, &time),
        );
    let object = decode(&envelope("coordination.k8s.io/v1", "Lease", &lease)).unwrap();
    assert_eq!(
        object["metadata"]["creationTimestamp"],
        "2026-11-27T04:00:00Z"
    );
    assert_eq!(object["spec"]["acquireTime"], "2026-11-27T04:00:00.123456Z");
    assert_eq!(object["spec"]["renewTime"], "2026-11-27T04:00:00.123456Z");
    assert_eq!(object["spec"]["leaseDurationSeconds"], 15);
    assert!(object["spec"].get("leaseTransitions").is_none(), "{object}");
}

#[test]
fn delete_options_are_found_under_any_group_version() {
    let options = Pb::default()
        .msg(2, &Pb::default().str(1, "uid-1"))
        .str(4, "Foreground")
        .str(5, "All");
    let object = decode(&envelope("discovery.k8s.io/v1", "DeleteOptions", &options)).unwrap();
    assert_eq!(object["preconditions"], json!({"uid": "uid-1"}));
    assert_eq!(object["propagationPolicy"], "Foreground");
    assert_eq!(object["dryRun"], json!(["All"]));
}

#[test]
fn inlined_structs_write_their_fields_at_the_parent_level() {
    let volume = Pb::default()
        .str(1, "data")
        .msg(2, &Pb::default().msg(2, &Pb::default().str(1, "Memory")));
    let container = Pb::default().str(1, "app").str(2, "nginx");
    let pod = Pb::default()
        .msg(1, &Pb::default().str(1, "p"))
        .msg(2, &Pb::default().msg(1, &volume).msg(2, &container));
    let object = decode(&envelope("v1", "Pod", &pod)).unwrap();
    assert_eq!(
        object["spec"]["volumes"][0],
        json!({"name": "data", "emptyDir": {"medium": "Memory"}})
    );
    assert_eq!(object["spec"]["containers"][0]["image"], "nginx");
    assert_eq!(object["spec"]["containers"][0]["resources"], json!({}));
}

#[test]
fn a_struct_sent_twice_is_merged_and_unknown_fields_are_skipped() {
    let service = Pb::default()
        .msg(1, &Pb::default().str(1, "web"))
        .msg(1, &Pb::default().str(3, "prod"))
        // A field number no version of ServiceSpec has, as a newer client could send.
        .msg(2, &Pb::default().str(4, "NodePort").int(999, 7));
    let object = decode(&envelope("v1", "Service", &service)).unwrap();
    assert_eq!(object["metadata"]["name"], "web");
    assert_eq!(object["metadata"]["namespace"], "prod");
    assert_eq!(object["spec"]["type"], "NodePort");
}

#[test]
fn negative_int32_values_survive_sign_extension() {
    let event = Pb::default().msg(1, &Pb::default().str(1, "e")).int(8, -3);
    let object = decode(&envelope("v1", "Event", &event)).unwrap();
    assert_eq!(object["count"], -3);
}

#[test]
fn broken_bodies_are_refused_with_what_is_wrong() {
    let cases: &[(Vec<u8>, u16, &str)] = &[
        (b"{\"kind\":\"Service\"}".to_vec(), 400, "magic number"),
        (
            envelope("example.com/v1", "Widget", &Pb::default()),
            415,
            "protobuf is not served for example.com/v1 Widget",
        ),
        (
            [
                envelope("v1", "Service", &service_bytes()),
                vec![0x0a, 0x20],
            ]
            .concat(),
            400,
            "claims 32 bytes",
        ),
        (
            envelope("v1", "Service", &Pb::default().int(1, 5)),
            400,
            "field 1 (metadata): wire type Varint",
        ),
        (
            envelope(
                "v1",
                "Service",
                &Pb::default().msg(1, &Pb::default().msg(8, &Pb::default().int(1, -5))),
            ),
            400,
            "outside 1970-01-01 to 9999-12-31",
        ),
        ([MAGIC, &[0x0a, 0xff]].concat(), 400, "varint is truncated"),
    ];
    for (body, code, wanted) in cases {
        let error = decode(body).unwrap_err();
        assert_eq!(error.code, *code, "{}", error.message);
        assert!(
            error.message.contains(wanted),
            "{wanted:?} not in {:?}",
            error.message
        );
    }
}

#[test]
fn every_served_kind_decodes_from_an_empty_body() {
    for (api_version, kind, message) in KINDS_FOR_TESTS {
        let object = decode(&envelope(api_version, kind, &Pb::default())).unwrap();
        assert_eq!(object["kind"], *kind, "{}", message.name);
    }
}

use schema::KINDS as KINDS_FOR_TESTS;

#[test]
fn only_the_protobuf_media_type_is_taken_for_protobuf() {
    assert!(is_protobuf("application/vnd.kubernetes.protobuf"));
    assert!(is_protobuf(
        "application/vnd.kubernetes.protobuf; charset=utf-8"
    ));
    assert!(!is_protobuf("application/json"));
}

/// A ValidatingWebhookConfiguration as client-go writes one: the rule's fields inlined in
/// RuleWithOperations (field 2), the CA bundle as raw bytes.
#[test]
fn webhook_configurations_decode_with_inlined_rules_and_bytes() {
    let rule = Pb::default()
        .str(1, "")
        .str(2, "v1")
        .str(3, "services")
        .str(4, "*");
    let rules = Pb::default().str(1, "CREATE").msg(2, &rule);
    let service = Pb::default()
        .str(1, "kube-lb")
        .str(2, "webhook")
        .int(4, 443);
    let client = Pb::default().msg(1, &service).bytes(2, b"foo\n");
    let webhook = Pb::default()
        .str(1, "services.kube-lb.io")
        .msg(2, &client)
        .msg(3, &rules)
        .str(6, "None")
        .int(7, 10)
        .str(8, "v1");
    let configuration = Pb::default()
        .msg(1, &Pb::default().str(1, "kube-lb"))
        .msg(2, &webhook);
    let object = decode(&envelope(
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        &configuration,
    ))
    .unwrap();
    let hook = &object["webhooks"][0];
    assert_eq!(hook["name"], "services.kube-lb.io", "{object}");
    assert_eq!(
        hook["rules"][0],
        json!({"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["services"], "scope": "*"})
    );
    assert_eq!(
        hook["clientConfig"],
        json!({"service": {"namespace": "kube-lb", "name": "webhook", "port": 443}, "caBundle": "Zm9vCg=="})
    );
    assert_eq!(hook["sideEffects"], "None");
    assert_eq!(hook["timeoutSeconds"], 10);
    assert_eq!(hook["admissionReviewVersions"], json!(["v1"]));
}

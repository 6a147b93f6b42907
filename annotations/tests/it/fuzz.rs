//! Seeded, replayable fuzz suite for [`kube_lb_annotations::parse`], run for a time budget.
//!
//! # How to run
//!
//! - CI: `kt -p kube-lb-annotations -E 'test(fuzz)'` runs a few seconds per target.
//! - Longer by hand: `KUBE_LB_FUZZ_SECS=600 kt -p kube-lb-annotations -E 'test(fuzz)'`.
//! - Replay: every run prints `KUBE_LB_FUZZ_SEED=<n>`; a failure prints the seed of the batch that
//!   failed, and setting that variable replays exactly that batch first.
//!
//! # Why proptest and not `cargo fuzz`
//!
//! `cargo fuzz` needs a nightly toolchain, which this project cannot install. For this target
//! proptest is of equal or better strength: the parser's input is a typed `Service` whose
//! interesting states are behind structure (a known annotation key *and* a value near a limit,
//! a port list that collides with `ssl-ports`, a dual-stack family list beside an IPv6 range).
//! A byte-level fuzzer has to rediscover the key names and the YAML shape before it reaches any
//! of that; this generator starts there. Coverage feedback is replaced by a committed corpus of
//! hostile Services (`tests/fuzz/corpus/annotations/`, plus the seed fixtures) that each case
//! mutates, so the known-deep states are always the starting point. A failure is shrunk to a
//! minimal Service and its seed is written to `fuzz.proptest-regressions`, which is committed and
//! replayed before new cases on every run.
//!
//! # Properties
//!
//! For every cloud: no panic; every error names an annotation key that the Service carries or a
//! field path under `spec.`/`metadata.` (a port index within the port list); every message is
//! one line; the rendered diagnostics grow at most linearly with the input (a 100 KB list must not
//! produce one copy of itself per entry); one parse stays under a time ceiling; parsing is
//! deterministic.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Service, SessionAffinityConfig};
use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_lb_annotations::keys::{aws, azure, baidu, common, gcp, openstack, tencent};
use kube_lb_annotations::{Cloud, Location, parse};
use proptest::prelude::*;
use proptest::test_runner::{
    Config, FileFailurePersistence, RngAlgorithm, TestError, TestRng, TestRunner,
};

/// Every key `keys.rs` names, so each parser branch is reachable.
const KEYS: &[&str] = &[
    common::SOURCE_RANGES,
    common::TOPOLOGY_KEYS,
    aws::TYPE,
    aws::INTERNAL,
    aws::PROXY_PROTOCOL,
    aws::ACCESS_LOG_EMIT_INTERVAL,
    aws::ACCESS_LOG_ENABLED,
    aws::ACCESS_LOG_BUCKET_NAME,
    aws::ACCESS_LOG_BUCKET_PREFIX,
    aws::CONNECTION_DRAINING_ENABLED,
    aws::CONNECTION_DRAINING_TIMEOUT,
    aws::CONNECTION_IDLE_TIMEOUT,
    aws::CROSS_ZONE,
    aws::EXTRA_SECURITY_GROUPS,
    aws::SECURITY_GROUPS,
    aws::SSL_CERT,
    aws::SSL_PORTS,
    aws::SSL_NEGOTIATION_POLICY,
    aws::BACKEND_PROTOCOL,
    aws::ADDITIONAL_RESOURCE_TAGS,
    aws::HEALTHCHECK_PROTOCOL,
    aws::HEALTHCHECK_PORT,
    aws::HEALTHCHECK_PATH,
    aws::HEALTHCHECK_HEALTHY_THRESHOLD,
    aws::HEALTHCHECK_UNHEALTHY_THRESHOLD,
    aws::HEALTHCHECK_TIMEOUT,
    aws::HEALTHCHECK_INTERVAL,
    aws::TARGET_GROUP_ATTRIBUTES,
    aws::EIP_ALLOCATIONS,
    aws::PRIVATE_IPV4_ADDRESSES,
    aws::TARGET_NODE_LABELS,
    aws::SUBNETS,
    gcp::LOAD_BALANCER_TYPE,
    gcp::LEGACY_LOAD_BALANCER_TYPE,
    gcp::INTERNAL_SUBNET,
    gcp::ALLOW_GLOBAL_ACCESS,
    gcp::BACKEND_SHARE,
    gcp::LEGACY_BACKEND_SHARE,
    gcp::NETWORK_TIER,
    gcp::L4_RBS,
    azure::INTERNAL,
    azure::INTERNAL_SUBNET,
    azure::PIP_NAME,
    azure::PIP_NAME_IPV6,
    azure::IPV4,
    azure::IPV6,
    azure::PIP_PREFIX_ID,
    azure::DNS_LABEL_NAME,
    azure::RESOURCE_GROUP,
    azure::PIP_TAGS,
    azure::ALLOWED_SERVICE_TAGS,
    azure::ALLOWED_IP_RANGES,
    azure::DENY_ALL_EXCEPT_SOURCE_RANGES,
    azure::TCP_IDLE_TIMEOUT,
    azure::DISABLE_TCP_RESET,
    azure::HA_PORTS,
    azure::DISABLE_FLOATING_IP,
    azure::DISABLE_NSG_RULE,
    azure::ADDITIONAL_PUBLIC_IPS,
    azure::PROBE_PROTOCOL,
    azure::PROBE_INTERVAL,
    azure::PROBE_NUM,
    azure::PROBE_REQUEST_PATH,
    "service.beta.kubernetes.io/port_80_health-probe_interval",
    "service.beta.kubernetes.io/port_80_health-probe_protocol",
    "service.beta.kubernetes.io/port_443_no_lb_rule",
    "service.beta.kubernetes.io/port_99999_health-probe_num-of-probe",
    "service.beta.kubernetes.io/port__health-probe_request-path",
    openstack::INTERNAL,
    openstack::FLOATING_NETWORK_ID,
    openstack::SUBNET_ID,
    openstack::LB_METHOD,
    openstack::PROXY_PROTOCOL,
    openstack::X_FORWARDED_FOR,
    openstack::KEEP_FLOATING_IP,
    openstack::CONNECTION_LIMIT,
    tencent::INTERNAL_SUBNET_ID,
    tencent::BACKENDS_LABEL,
    tencent::EXISTED_LBID,
    tencent::EXTENSIVE_PARAMETERS,
    tencent::LISTENER_PARAMETERS,
    tencent::LOADBALANCE_TYPE,
    tencent::INTERNET_CHARGE_TYPE,
    tencent::INTERNET_MAX_BANDWIDTH_OUT,
    tencent::LOCAL_SVC_ONLY_BIND_NODE_WITH_POD,
    baidu::INTERNAL_VPC,
];

/// Keys outside `KEYS`: the AWS Load Balancer Controller-only and Azure-unsupported families
/// (built from the lists in `keys.rs`) and near-misses of real keys.
fn extra_key() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(aws::LBC_ONLY_SUFFIXES)
            .prop_map(|s| format!("{}{s}", aws::PREFIX)),
        proptest::sample::select(azure::UNSUPPORTED_PREFIXES).prop_map(|p| format!("{p}x")),
        "[a-z-]{0,12}".prop_map(|s| format!("{}{s}", aws::PREFIX)),
        "[a-z-]{0,12}".prop_map(|s| format!("{}{s}", azure::PREFIX)),
        (0u32..70000, "[a-z_-]{0,24}")
            .prop_map(|(port, rest)| format!("{}{port}_{rest}", azure::PORT_PREFIX)),
        Just(format!("{} ", aws::TYPE)),
        Just(aws::TYPE.to_uppercase()),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => proptest::sample::select(KEYS).prop_map(str::to_owned),
        1 => extra_key(),
    ]
}

/// Numbers at and over the limits the parsers check (ports, thresholds, timeouts, i32, u64).
const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "4",
    "5",
    "10",
    "60",
    "300",
    "3600",
    "4000",
    "4001",
    "65535",
    "65536",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999",
    "1e3",
    "0x50",
    "080",
    "+80",
    " 80 ",
    "80.0",
    "NaN",
    "inf",
    "٨٠",
];

/// Words the parsers match on, and their near-misses.
const WORDS: &[&str] = &[
    "",
    " ",
    "true",
    "false",
    "True",
    "FALSE",
    "yes",
    "nlb",
    "nlb-ip",
    "external",
    "NLB",
    "clb",
    "Internal",
    "internal",
    "External",
    "Premium",
    "Standard",
    "tcp",
    "TCP",
    "http",
    "https",
    "ssl",
    "udp",
    "sctp",
    "*",
    "traffic-port",
    "ROUND_ROBIN",
    "LEAST_CONNECTIONS",
    "0.0.0.0/0",
    "::/0",
    "10.0.0.0/8",
    "10.0.0.1",
    "fd00::1",
    "300.1.1.1/33",
    "10.0.0.0/8,",
    ",,,,",
    "a=b",
    "a=",
    "=b",
    "a==b",
    "key in (a, b",
    "key notin (a)",
    "!key",
    "arn:aws:acm:us-east-1:123456789012:certificate/abc",
    "subnet-0123,subnet-4567",
    "eipalloc-1,eipalloc-2",
    "sg-1,sg-2",
    "/healthz",
    "healthz",
    "https://example.invalid/",
];

/// Hostile strings: unicode, control characters, JSON-ish and YAML-ish values.
const ODD: &[&str] = &[
    "\u{0}",
    "\u{0}80",
    "80\u{0}",
    "\r\n",
    "80\n443",
    "\u{1b}[31mred\u{1b}[0m",
    "\u{202e}08",
    "\u{200b}80",
    "８０",
    "ⅷ",
    "🚀",
    "e\u{301}",
    "\u{feff}true",
    "{\"a\":1}",
    "[1,2,3]",
    "{}",
    "[]",
    "null",
    "~",
    "- 80\n- 443",
    "a: b",
    "&a [*a]",
    "\"80\"",
    "'80'",
    "\\",
    "%s%n%x",
    "${HOME}",
    "$(reboot)",
];

/// Separators lists are split on, right and wrong.
const SEPARATORS: &[&str] = &[",", ", ", " ,", ";", " ", "\n", ",,", "\t"];

fn list_item() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(NUMBERS).prop_map(str::to_owned),
        proptest::sample::select(WORDS).prop_map(str::to_owned),
        proptest::sample::select(ODD).prop_map(str::to_owned),
        (0u8..=255, 0u8..=255, 0u8..=40).prop_map(|(a, b, len)| format!("{a}.{b}.0.0/{len}")),
        (0u16..=u16::MAX, 0u8..=130).prop_map(|(a, len)| format!("fd{a:x}::/{len}")),
        "[a-z0-9]{1,8}=[a-z0-9]{0,8}",
        "[ -~]{0,16}",
    ]
}

/// A list value: a few items, or thousands (the 100 KB `ssl-ports` of the issue is one).
fn list_value() -> impl Strategy<Value = String> {
    let small = (
        prop::collection::vec(list_item(), 0..8),
        proptest::sample::select(SEPARATORS),
    )
        .prop_map(|(items, sep)| items.join(sep));
    let huge = (
        list_item(),
        1000usize..12000,
        proptest::sample::select(SEPARATORS),
    )
        .prop_map(|(item, n, sep)| vec![item; n].join(sep));
    let counting = (1000u32..12000).prop_map(|n| {
        (0..n)
            .map(|i| (i % 70000).to_string())
            .collect::<Vec<_>>()
            .join(",")
    });
    prop_oneof![6 => small, 1 => huge, 1 => counting]
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(NUMBERS).prop_map(str::to_owned),
        4 => proptest::sample::select(WORDS).prop_map(str::to_owned),
        3 => proptest::sample::select(ODD).prop_map(str::to_owned),
        4 => list_value(),
        2 => any::<String>().prop_map(|s| s.chars().take(64).collect()),
        2 => "[ -~\n\t]{0,32}",
        1 => (proptest::sample::select(WORDS), 1usize..120_000)
            .prop_map(|(w, n)| w.repeat(n.min(120_000 / w.len().max(1)))),
        1 => (1usize..200_000).prop_map(|n| "9".repeat(n)),
    ]
}

/// Ports: numbers at and over the 1..=65535 range, every protocol spelling, hostile names.
fn service_port() -> impl Strategy<Value = ServicePort> {
    let number = prop_oneof![
        4 => proptest::sample::select(&[80, 443, 53, 8080, 30000][..]),
        2 => proptest::sample::select(&[0, -1, 1, 65535, 65536, i32::MAX, i32::MIN][..]),
        1 => any::<i32>(),
    ];
    let node_port = prop_oneof![
        Just(None),
        Just(Some(30080)),
        proptest::sample::select(&[0, 29999, 30000, 32767, 32768, 65536, -5, i32::MAX][..])
            .prop_map(Some),
        any::<i32>().prop_map(Some),
    ];
    let protocol = prop_oneof![
        4 => Just(Some("TCP".to_owned())),
        2 => Just(Some("UDP".to_owned())),
        1 => Just(Some("SCTP".to_owned())),
        1 => Just(None),
        1 => proptest::sample::select(&["tcp", "", "HTTP", "TCP ", "ICMP", "\u{0}"][..])
            .prop_map(|s| Some(s.to_owned())),
    ];
    let name = prop_oneof![
        Just(None),
        "[a-z][a-z0-9-]{0,10}".prop_map(Some),
        proptest::sample::select(ODD).prop_map(|s| Some(s.to_owned())),
        (64usize..300).prop_map(|n| Some("a".repeat(n))),
        Just(Some("-http".to_owned())),
    ];
    let target = prop_oneof![
        Just(None),
        any::<i32>().prop_map(|n| Some(IntOrString::Int(n))),
        "[a-z-]{0,16}".prop_map(|s| Some(IntOrString::String(s))),
    ];
    (number, node_port, protocol, name, target).prop_map(
        |(port, node_port, protocol, name, target_port)| ServicePort {
            port,
            node_port,
            protocol,
            name,
            target_port,
            ..Default::default()
        },
    )
}

fn optional_word(words: &'static [&'static str]) -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        proptest::sample::select(words).prop_map(|s| Some(s.to_owned())),
        proptest::sample::select(ODD).prop_map(|s| Some(s.to_owned())),
    ]
}

/// Edits applied to the spec of a corpus Service.
#[derive(Debug, Clone)]
enum SpecEdit {
    Ports(Vec<ServicePort>),
    ManyPorts(usize),
    SourceRanges(Vec<String>),
    ManySourceRanges(usize),
    TrafficPolicy(Option<String>),
    HealthCheckNodePort(Option<i32>),
    IpFamilies(Vec<String>),
    IpFamilyPolicy(Option<String>),
    LoadBalancerIp(Option<String>),
    AllocateNodePorts(Option<bool>),
    LoadBalancerClass(Option<String>),
    SessionAffinity(Option<String>, Option<i32>),
    ExternalIps(Vec<String>),
    Type(Option<String>),
    DropSpec,
}

fn spec_edit() -> impl Strategy<Value = SpecEdit> {
    prop_oneof![
        4 => prop::collection::vec(service_port(), 0..12).prop_map(SpecEdit::Ports),
        1 => (100usize..3000).prop_map(SpecEdit::ManyPorts),
        2 => prop::collection::vec(list_item(), 0..8).prop_map(SpecEdit::SourceRanges),
        1 => (1000usize..6000).prop_map(SpecEdit::ManySourceRanges),
        2 => optional_word(&["Local", "Cluster", "local", ""]).prop_map(SpecEdit::TrafficPolicy),
        1 => prop_oneof![Just(None), any::<i32>().prop_map(Some)]
            .prop_map(SpecEdit::HealthCheckNodePort),
        2 => prop::collection::vec(
            proptest::sample::select(&["IPv4", "IPv6", "ipv4", "IPv5", ""][..]).prop_map(str::to_owned),
            0..4,
        )
        .prop_map(SpecEdit::IpFamilies),
        1 => optional_word(&["SingleStack", "PreferDualStack", "RequireDualStack", "DualStack"])
            .prop_map(SpecEdit::IpFamilyPolicy),
        2 => optional_word(&["10.0.0.5", "fd00::5", "0.0.0.0", "256.0.0.1", "10.0.0.0/8", ""])
            .prop_map(SpecEdit::LoadBalancerIp),
        1 => any::<Option<bool>>().prop_map(SpecEdit::AllocateNodePorts),
        1 => optional_word(&["kube-lb.io/lb", "service.k8s.aws/nlb", "", "a/b/c"])
            .prop_map(SpecEdit::LoadBalancerClass),
        1 => (optional_word(&["ClientIP", "None", "clientip"]), any::<Option<i32>>())
            .prop_map(|(a, t)| SpecEdit::SessionAffinity(a, t)),
        1 => prop::collection::vec(list_item(), 0..4).prop_map(SpecEdit::ExternalIps),
        1 => optional_word(&["LoadBalancer", "NodePort", "ClusterIP", "loadbalancer"])
            .prop_map(SpecEdit::Type),
        1 => Just(SpecEdit::DropSpec),
    ]
}

fn apply_edit(service: &mut Service, edit: SpecEdit) {
    if matches!(edit, SpecEdit::DropSpec) {
        service.spec = None;
        return;
    }
    let spec: &mut ServiceSpec = service.spec.get_or_insert_with(Default::default);
    match edit {
        SpecEdit::Ports(ports) => spec.ports = Some(ports),
        SpecEdit::ManyPorts(n) => {
            spec.ports = Some(
                (0..n)
                    .map(|i| ServicePort {
                        port: i32::try_from(i % 70000).unwrap_or(1),
                        name: Some(format!("p{i}")),
                        protocol: Some(if i % 2 == 0 { "TCP" } else { "UDP" }.to_owned()),
                        ..Default::default()
                    })
                    .collect(),
            )
        }
        SpecEdit::SourceRanges(ranges) => spec.load_balancer_source_ranges = Some(ranges),
        SpecEdit::ManySourceRanges(n) => {
            spec.load_balancer_source_ranges = Some(
                (0..n)
                    .map(|i| format!("10.{}.{}.0/24", (i / 256) % 256, i % 256))
                    .collect(),
            )
        }
        SpecEdit::TrafficPolicy(p) => spec.external_traffic_policy = p,
        SpecEdit::HealthCheckNodePort(p) => spec.health_check_node_port = p,
        SpecEdit::IpFamilies(f) => spec.ip_families = Some(f),
        SpecEdit::IpFamilyPolicy(p) => spec.ip_family_policy = p,
        SpecEdit::LoadBalancerIp(ip) => spec.load_balancer_ip = ip,
        SpecEdit::AllocateNodePorts(a) => spec.allocate_load_balancer_node_ports = a,
        SpecEdit::LoadBalancerClass(c) => spec.load_balancer_class = c,
        SpecEdit::SessionAffinity(a, t) => {
            spec.session_affinity = a;
            spec.session_affinity_config = t.map(|timeout| SessionAffinityConfig {
                client_ip: Some(k8s_openapi::api::core::v1::ClientIPConfig {
                    timeout_seconds: Some(timeout),
                }),
            });
        }
        SpecEdit::ExternalIps(ips) => spec.external_ips = Some(ips),
        SpecEdit::Type(t) => spec.type_ = t,
        SpecEdit::DropSpec => {}
    }
}

/// One generated case: a corpus Service, annotation edits, spec edits.
#[derive(Debug, Clone)]
struct Case {
    base: usize,
    annotations: Vec<(String, String)>,
    clear_annotations: bool,
    edits: Vec<SpecEdit>,
}

fn case(corpus_len: usize) -> impl Strategy<Value = Case> {
    (
        0..corpus_len,
        prop::collection::vec((key(), value()), 0..10),
        prop::bool::weighted(0.2),
        prop::collection::vec(spec_edit(), 0..4),
    )
        .prop_map(|(base, annotations, clear_annotations, edits)| Case {
            base,
            annotations,
            clear_annotations,
            edits,
        })
}

fn build(corpus: &[Service], case: &Case) -> Service {
    let mut service = corpus[case.base].clone();
    if case.clear_annotations {
        service.metadata.annotations = None;
    }
    let annotations = service
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    for (key, value) in &case.annotations {
        annotations.insert(key.clone(), value.clone());
    }
    for edit in &case.edits {
        apply_edit(&mut service, edit.clone());
    }
    // The corpus is mostly LoadBalancer Services; keep it so unless an edit says otherwise, so
    // the parsers (not the early skip) see most cases.
    service
}

/// Bytes of user input in a Service, to bound the diagnostics against.
fn input_size(service: &Service) -> usize {
    serde_json::to_vec(service).map(|v| v.len()).unwrap_or(0)
}

/// Ceiling of one `parse` call (debug build, shared 2-core machine: generous, but a quadratic
/// path over a 100 KB value takes seconds).
const PARSE_CEILING: Duration = Duration::from_secs(2);

/// Which properties a run checks: the output bound is its own test so that a known failure of it
/// (tracked in the report) cannot hide a panic or an unlocated error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Property {
    /// No panic, located one-line diagnostics, time ceiling, determinism.
    Sound,
    /// Diagnostics at most linear in the input.
    Bounded,
}

fn check(service: &Service, property: Property) -> Result<(), TestCaseError> {
    let annotations = service.metadata.annotations.clone().unwrap_or_default();
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .map_or(0, Vec::len);
    let budget = 8 * input_size(service) + 256 * 1024;
    for &cloud in Cloud::ALL {
        // CPU time of this thread, not wall time: on a 2-core CI machine running other suites
        // beside this one, wall time measures the scheduler, not the parser.
        let started = thread_cpu_time();
        let result = parse(cloud, service);
        let took = thread_cpu_time().saturating_sub(started);
        if property == Property::Bounded {
            let (errors, warnings) = match result {
                Ok(parsed) => (Vec::new(), parsed.warnings),
                Err(errors) => (errors.errors().to_vec(), errors.warnings().to_vec()),
            };
            let rendered: usize = errors.iter().map(|e| e.to_string().len()).sum::<usize>()
                + warnings.iter().map(|w| w.to_string().len()).sum::<usize>();
            prop_assert!(
                rendered <= budget,
                "{cloud}: {} errors and {} warnings render to {rendered} bytes for {} bytes of \
                 input (bound {budget}): diagnostics must be capped and summarised",
                errors.len(),
                warnings.len(),
                input_size(service)
            );
            continue;
        }
        prop_assert!(
            took < PARSE_CEILING,
            "parse for {cloud} took {took:?} (ceiling {PARSE_CEILING:?})"
        );
        prop_assert_eq!(
            &result,
            &parse(cloud, service),
            "parse is not deterministic"
        );
        let (errors, warnings) = match result {
            Ok(parsed) => (Vec::new(), parsed.warnings),
            Err(errors) => (errors.errors().to_vec(), errors.warnings().to_vec()),
        };
        for error in &errors {
            check_location(&error.location, &annotations, ports)
                .map_err(|why| TestCaseError::fail(format!("{cloud}: {why}: {error}")))?;
            prop_assert!(!error.detail.is_empty(), "{cloud}: empty detail: {error}");
            let line = error.to_string();
            prop_assert!(!line.contains('\n'), "{cloud}: multi-line error: {line:?}");
        }
        for warning in &warnings {
            check_location(&warning.location, &annotations, ports)
                .map_err(|why| TestCaseError::fail(format!("{cloud}: {why}: {warning}")))?;
            let line = warning.to_string();
            prop_assert!(
                !line.contains('\n'),
                "{cloud}: multi-line warning: {line:?}"
            );
        }
    }
    Ok(())
}

/// An annotation location must be a key the Service carries or a known key; a field path must be
/// under `spec.` or `metadata.` and index an existing port.
fn check_location(
    location: &Location,
    annotations: &BTreeMap<String, String>,
    ports: usize,
) -> Result<(), String> {
    match location {
        // A key the Service lacks is fine when it is a real key: "set X" or "X is off, so Y
        // has no effect" point at the key to write.
        Location::Annotation(key)
            if annotations.contains_key(key) || KEYS.contains(&key.as_str()) =>
        {
            Ok(())
        }
        Location::Annotation(key) => {
            Err(format!("names annotation {key:?}, neither set nor known"))
        }
        Location::Field(path) => {
            if !(path.starts_with("spec.") || path.starts_with("metadata.") || path == "spec") {
                return Err(format!(
                    "field path {path:?} is not under spec. or metadata."
                ));
            }
            if let Some(rest) = path.strip_prefix("spec.ports[") {
                let index: usize = rest
                    .split(']')
                    .next()
                    .and_then(|i| i.parse().ok())
                    .ok_or_else(|| format!("bad port index in {path:?}"))?;
                if index >= ports {
                    return Err(format!("{path:?} indexes past {ports} ports"));
                }
            }
            Ok(())
        }
    }
}

fn corpus_dirs() -> Vec<PathBuf> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    vec![
        here.join("../tests/fuzz/corpus/annotations"),
        here.join("tests/fixtures/seeds"),
    ]
}

/// The committed corpus: every Service document of every `*.yaml` file in the corpus dirs.
fn load_corpus() -> Vec<Service> {
    let mut services = Vec::new();
    for dir in corpus_dirs() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for doc in serde_yaml_ng::Deserializer::from_str(&text) {
                let value: serde_json::Value = match serde::Deserialize::deserialize(doc) {
                    Ok(value) => value,
                    Err(_) => continue,
                };
                if value.get("kind").and_then(|k| k.as_str()) != Some("Service") {
                    continue;
                }
                if let Ok(service) = serde_json::from_value::<Service>(value) {
                    services.push(service);
                }
            }
        }
    }
    assert!(services.len() >= 10, "corpus too small: {}", services.len());
    services
}

/// `KUBE_LB_FUZZ_SECS` (default 3): how long to generate cases.
fn budget() -> Duration {
    let secs = std::env::var("KUBE_LB_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(3.0);
    Duration::from_secs_f64(secs.max(0.0))
}

/// Seed used under `CI=true` when none is given: CI must be reproducible, so it runs a fixed
/// seed (new seeds are explored by runs outside CI, which print theirs).
const CI_SEED: u64 = 1;

/// CPU time consumed by the calling thread (`/proc/thread-self/schedstat`: nanoseconds on a CPU
/// come first).
fn thread_cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat")
        .expect("/proc/thread-self/schedstat is readable on Linux");
    let nanos: u64 = stat
        .split_whitespace()
        .next()
        .and_then(|field| field.parse().ok())
        .expect("schedstat starts with the thread's CPU time in nanoseconds");
    Duration::from_nanos(nanos)
}

/// `KUBE_LB_FUZZ_SEED`; else [`CI_SEED`] under `CI=true`; else a fresh seed from the clock.
fn master_seed() -> u64 {
    match std::env::var("KUBE_LB_FUZZ_SEED") {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("KUBE_LB_FUZZ_SEED={text:?} is not a u64")),
        Err(_) if std::env::var_os("CI").is_some_and(|v| v == "true") => CI_SEED,
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    }
}

/// splitmix64: batch `i` of seed `s` gets `mix(s, i)`; batch 0 runs `s` itself, so the seed a
/// failure prints replays that batch first.
fn batch_seed(master: u64, batch: u64) -> u64 {
    if batch == 0 {
        return master;
    }
    let mut z = master.wrapping_add(batch.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn rng_for(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&batch_seed(seed, i as u64 + 1).to_le_bytes());
    }
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// Cuts a long rendering for a failure message (a shrunk case can still hold a 10 KB value).
fn clip(text: String) -> String {
    const MAX: usize = 4000;
    if text.len() <= MAX {
        return text;
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

fn run(name: &str, property: Property) {
    let corpus = load_corpus();
    let master = master_seed();
    let budget = budget();
    eprintln!(
        "{name}: KUBE_LB_FUZZ_SEED={master} KUBE_LB_FUZZ_SECS={} corpus={}",
        budget.as_secs_f64(),
        corpus.len()
    );
    let started = Instant::now();
    let mut cases = 0u64;
    let mut batch = 0u64;
    // At least one batch, so a replay with a zero budget still runs the failing seed.
    while batch == 0 || started.elapsed() < budget {
        let seed = batch_seed(master, batch);
        let config = Config {
            cases: BATCH,
            max_shrink_iters: 2048,
            source_file: Some(file!()),
            failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
                "proptest-regressions",
            ))),
            ..Config::default()
        };
        let mut runner = TestRunner::new_with_rng(config, rng_for(seed));
        let result = runner.run(&case(corpus.len()), |case| {
            check(&build(&corpus, &case), property)
        });
        cases += u64::from(BATCH);
        match result {
            Ok(()) => {}
            Err(TestError::Fail(reason, minimal)) => {
                let service = serde_json::to_string(&build(&corpus, &minimal)).unwrap_or_default();
                panic!(
                    "{name} failed (replay: KUBE_LB_FUZZ_SEED={seed}): {}\nminimal case: {}\n\
                     Service: {}",
                    clip(reason.to_string()),
                    clip(format!("{minimal:?}")),
                    clip(service)
                );
            }
            Err(TestError::Abort(reason)) => {
                panic!("{name} aborted (KUBE_LB_FUZZ_SEED={seed}): {reason}")
            }
        }
        batch += 1;
    }
    eprintln!(
        "{name}: {cases} cases x {} clouds in {:?}, no failure",
        Cloud::ALL.len(),
        started.elapsed()
    );
}

/// Cases per proptest run; the budget loop runs batches until time is up.
const BATCH: u32 = 16;

#[test]
fn fuzz_annotation_parser_every_cloud() {
    run("fuzz_annotation_parser_every_cloud", Property::Sound);
}

#[test]
fn fuzz_annotation_diagnostics_linear_in_input() {
    run(
        "fuzz_annotation_diagnostics_linear_in_input",
        Property::Bounded,
    );
}

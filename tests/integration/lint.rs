//! `kube-lb lint` end to end: golden files of the output on `examples/` and on the invalid
//! fixtures, plus stdin, JSON, directory walking and exit statuses.
//!
//! Golden files live in `tests/golden/lint-*.txt`. After an intended output change, regenerate
//! them with `KUBE_LB_UPDATE_GOLDEN=1 cargo test --test lint` and review the diff.

use std::path::{Path, PathBuf};

use assert_cmd::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn lint(args: &[&str]) -> assert_cmd::assert::Assert {
    let mut cmd = Command::cargo_bin("kube-lb").expect("kube-lb binary");
    cmd.current_dir(root())
        .env_remove("KUBE_LB_CLOUD")
        .env_remove("KUBE_LB_LOCAL_POOL")
        .env_remove("KUBE_LB_LOAD_BALANCER_CLASS")
        .env_remove("KUBE_LB_DEFAULT_CLASS")
        .env("NO_COLOR", "1")
        .arg("lint")
        .args(args);
    cmd.assert()
}

/// Runs lint and compares `exit`, stdout and stderr with `tests/golden/<name>.txt`.
fn golden(name: &str, args: &[&str]) {
    let output = lint(args).get_output().clone();
    let actual = format!(
        "$ kube-lb lint {}\nexit: {}\n--- stdout\n{}--- stderr\n{}",
        args.join(" "),
        output
            .status
            .code()
            .map_or("signal".to_owned(), |c| c.to_string()),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    let path = root().join("tests/golden").join(format!("{name}.txt"));
    if std::env::var_os("KUBE_LB_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; create it with KUBE_LB_UPDATE_GOLDEN=1 cargo test --test lint",
            path.display()
        )
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(e, a)| e != a)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the output, first at line {}:\n  expected: {:?}\n  actual:   {:?}\n\
             full output:\n{actual}",
            path.display(),
            first + 1,
            expected.lines().nth(first),
            actual.lines().nth(first),
        );
    }
}

/// The pool `kube-lb up` and the reconcile tests give the local provider (the default pool and
/// a loopback range beside it).
const EXAMPLES_POOL: &str = "127.240.0.0/16,127.0.0.240-127.0.0.243";

#[test]
fn golden_examples_local() {
    golden(
        "lint-examples-local",
        &["-f", "examples/", "--local-pool", EXAMPLES_POOL],
    );
}

#[test]
fn golden_examples_aws() {
    golden(
        "lint-examples-aws",
        &["-f", "examples/aws", "--cloud", "aws"],
    );
}

#[test]
fn golden_examples_gcp() {
    golden(
        "lint-examples-gcp",
        &["-f", "examples/gcp", "--cloud", "gcp"],
    );
}

#[test]
fn golden_examples_azure() {
    golden(
        "lint-examples-azure",
        &["-f", "examples/azure", "--cloud", "azure"],
    );
}

#[test]
fn golden_invalid_collects_every_error() {
    golden(
        "lint-invalid-aws",
        &["-f", "tests/fixtures/invalid", "--cloud", "aws"],
    );
}

#[test]
fn golden_json_output() {
    golden(
        "lint-demo-json",
        &[
            "-f",
            "examples/local/demo.yaml",
            "-o",
            "json",
            "--local-pool",
            EXAMPLES_POOL,
        ],
    );
}

#[test]
fn golden_judgement_fixtures_name_object_and_field() {
    // The fixtures `lint_and_reconcile_give_the_same_verdict_per_service` runs through both.
    golden("lint-judgement-local", &["-f", "tests/fixtures/judgement"]);
}

#[test]
fn golden_judgement_fixtures_on_node_port_clouds() {
    // The same fixtures, judged as `reconcile_clouds::judgement` replays them on each mock.
    for cloud in ["tencent", "baidu"] {
        golden(
            &format!("lint-judgement-{cloud}"),
            &[
                "-f",
                "tests/fixtures/judgement/clouds.yaml",
                "--cloud",
                cloud,
            ],
        );
    }
}

#[test]
fn golden_yaml_syntax_error_exits_2() {
    golden("lint-broken", &["-f", "tests/fixtures/broken.yaml"]);
}

#[test]
fn exit_status_follows_the_worst_object() {
    lint(&["-f", "examples/local", "--local-pool", EXAMPLES_POOL]).code(0);
    // demo.yaml pins an address of the default pool.
    lint(&["-f", "examples/local"]).code(0);
    // Outside the pool given, the local provider refuses it, and so does lint.
    lint(&["-f", "examples/local", "--local-pool", "127.241.0.0/16"]).code(1);
    // The GCP and Azure examples pin their clouds' internal addresses: refused as local ones.
    lint(&["-f", "examples/", "--local-pool", EXAMPLES_POOL]).code(1);
    lint(&["-f", "examples/aws", "--cloud", "aws"]).code(0);
    lint(&["-f", "tests/fixtures/invalid", "--cloud", "aws"]).code(1);
    // An unreadable input wins over invalid objects.
    let missing = lint(&[
        "-f",
        "tests/fixtures/invalid",
        "-f",
        "tests/fixtures/no-such-file.yaml",
    ])
    .code(2);
    assert!(text(&missing.get_output().stderr).contains("no-such-file.yaml"));
}

#[test]
fn stdin_is_read_with_dash() {
    let text =
        std::fs::read_to_string(root().join("examples/aws/nlb-local.yaml")).expect("example");
    let mut cmd = Command::cargo_bin("kube-lb").expect("kube-lb binary");
    let assert = cmd
        .args(["lint", "-f", "-", "--cloud", "aws"])
        .env_remove("KUBE_LB_CLOUD")
        .write_stdin(text)
        .assert()
        .code(0);
    let stdout = self::text(&assert.get_output().stdout);
    assert!(stdout.contains("source: <stdin>#1"), "{stdout}");
    assert!(stdout.contains("kind: nlb"), "{stdout}");
}

#[test]
fn directories_are_walked_for_yaml_yml_and_json_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nested = dir.path().join("a/b");
    std::fs::create_dir_all(&nested).expect("mkdir");
    let service = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "from-json", "namespace": "t"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}
    });
    std::fs::write(nested.join("svc.json"), service.to_string()).expect("write");
    std::fs::write(
        dir.path().join("svc.yml"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: from-yml}\nspec: {type: NodePort}\n",
    )
    .expect("write");
    std::fs::write(dir.path().join("notes.txt"), "kind: Service\n").expect("write");
    let dir_arg = dir.path().to_str().expect("utf-8 path");
    let output = lint(&["-f", dir_arg, "-o", "json"])
        .code(0)
        .get_output()
        .stdout
        .clone();
    let reports: serde_json::Value = serde_json::from_slice(&output).expect("json");
    let objects: Vec<(&str, &str)> = reports
        .as_array()
        .expect("array")
        .iter()
        .map(|r| {
            (
                r["object"].as_str().unwrap_or(""),
                r["status"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        objects,
        vec![
            ("Service t/from-json", "ok"),
            ("Service default/from-yml", "skipped")
        ]
    );
}

#[test]
fn objects_that_are_not_valid_services_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bool.yaml");
    // The seed's TKE block writes `true` unquoted: a YAML boolean cannot be an annotation.
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n  annotations:\n    \
         service.kubernetes.io/local-svc-only-bind-node-with-pod: true\nspec: {type: LoadBalancer}\n",
    )
    .expect("write");
    let assert = lint(&["-f", file.to_str().expect("utf-8"), "--cloud", "tencent"]).code(1);
    assert!(text(&assert.get_output().stdout).contains("not a valid Service object"));
}

#[test]
fn help_explains_every_flag() {
    let output = lint(&["--help"]).code(0).get_output().stdout.clone();
    let help = String::from_utf8_lossy(&output);
    for needle in [
        "--filename",
        "-f",
        "--cloud",
        "--output",
        "-o",
        "--local-pool",
        "IPPool",
        "--load-balancer-class",
        "--default-class",
        "local",
        "aws",
        "gcp",
        "azure",
        "openstack",
        "tencent",
        "baidu",
        "yaml",
        "json",
        "Exit status",
    ] {
        assert!(help.contains(needle), "help lacks {needle:?}:\n{help}");
    }
}

#[test]
fn every_example_is_covered_by_a_golden_file() {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root().join("examples"), &mut files);
    let golden = std::fs::read_to_string(root().join("tests/golden/lint-examples-local.txt"))
        .expect("golden file");
    for file in files {
        let relative = file
            .strip_prefix(root())
            .expect("under root")
            .display()
            .to_string();
        assert!(
            golden.contains(&format!("source: {relative}#")),
            "{relative} not linted"
        );
    }
}

/// Writes `text` to `name` in a fresh directory; returns the directory (kept alive by the caller)
/// and the file path.
fn fixture(name: &str, text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    let path = path.to_str().expect("utf-8").to_owned();
    (dir, path)
}

fn service_yaml(name: &str, annotations: &str, spec: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: t\n  \
         annotations: {{{annotations}}}\nspec:\n  type: LoadBalancer\n{spec}\n"
    )
}

#[test]
fn a_huge_annotation_value_gives_a_bounded_report() {
    // The fuzz finding: a 100 KB ssl-ports value (9,310 entries) made 955 MB of output.
    let entries: Vec<String> = (0..9_310).map(|i| format!("port-name-{i}")).collect();
    let value = entries.join(",");
    assert!(value.len() > 100_000);
    let annotations = format!(
        "service.beta.kubernetes.io/aws-load-balancer-ssl-cert: \"arn:aws:acm:us-east-1:1:certificate/x\", \
         service.beta.kubernetes.io/aws-load-balancer-ssl-ports: \"{value}\""
    );
    let (_dir, file) = fixture(
        "huge.yaml",
        &service_yaml("huge", &annotations, "  ports: [{port: 443}]"),
    );
    let assert = lint(&["-f", &file, "--cloud", "aws"]).code(0);
    let stdout = text(&assert.get_output().stdout);
    assert!(stdout.len() < 16 * 1024, "{} bytes of output", stdout.len());
    assert!(stdout.contains("… and 9,305 more warnings"), "{stdout}");
    assert!(stdout.contains("bytes in all"), "{stdout}");
}

#[test]
fn deep_nesting_and_alias_bombs_are_refused_early_with_exit_2() {
    let deep_flow = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_block = format!("{}x\n", "- ".repeat(100_000));
    let mut laughs = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = i - 1;
        laughs.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            vec![format!("*a{p}"); 10].join(", ")
        ));
    }
    let cases = [
        (
            "deep-flow.yaml",
            deep_flow.as_str(),
            "nesting deeper than 100 levels at line 1",
        ),
        (
            "deep-flow.json",
            deep_flow.as_str(),
            "nesting deeper than 100 levels at line 1",
        ),
        (
            "deep-block.yaml",
            deep_block.as_str(),
            "nesting deeper than 100 levels at line 1",
        ),
        ("laughs.yaml", laughs.as_str(), "billion laughs"),
    ];
    for (name, body, needle) in cases {
        let (_dir, file) = fixture(name, body);
        let started = std::time::Instant::now();
        let assert = lint(&["-f", &file]).code(2);
        let stderr = text(&assert.get_output().stderr);
        assert!(stderr.contains(needle), "{name}: {stderr}");
        // The YAML parser alone took 16–20 s on these; the scan refuses them in milliseconds.
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_secs(5), "{name}: {took:?}");
    }
}

#[test]
fn a_wrong_typed_field_is_named_with_its_path_and_the_rest_is_linted() {
    let mut text = String::new();
    for name in ["a", "b", "c"] {
        text.push_str(&service_yaml(name, "", "  ports: [{port: 80}]"));
    }
    text.push_str(&service_yaml(
        "typo",
        "",
        "  ports: [{port: 80, nodePort: \"30000\"}]",
    ));
    let (_dir, file) = fixture("mixed.yaml", &text);
    let output = lint(&["-f", &file, "-o", "json"])
        .code(1)
        .get_output()
        .stdout
        .clone();
    let reports: serde_json::Value = serde_json::from_slice(&output).expect("json");
    let by_object: Vec<(String, String, String)> = reports
        .as_array()
        .expect("array")
        .iter()
        .map(|r| {
            (
                r["object"].as_str().unwrap_or_default().to_owned(),
                r["status"].as_str().unwrap_or_default().to_owned(),
                r["errors"][0].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(by_object.len(), 4, "{by_object:?}");
    for (object, status, _) in &by_object[..3] {
        assert_eq!(status, "ok", "{object}");
    }
    let (object, status, error) = &by_object[3];
    assert_eq!(
        (object.as_str(), status.as_str()),
        ("Service t/typo", "invalid")
    );
    assert_eq!(
        error,
        "not a valid Service object: spec.ports[0].nodePort: invalid type: string \"30000\", \
         expected i32"
    );
}

#[test]
fn per_cloud_protocol_limits_are_lint_errors() {
    let sctp = service_yaml("sctp", "", "  ports: [{port: 9, protocol: SCTP}]");
    let mixed = service_yaml(
        "mixed",
        "",
        "  ports: [{name: dns-udp, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]",
    );
    let no_node_ports = service_yaml(
        "no-node-ports",
        "",
        "  allocateLoadBalancerNodePorts: false\n  ports: [{port: 80}]",
    );
    // (cloud, manifest, exit, needle in the output)
    let cases = [
        (
            "gcp",
            &sctp,
            1,
            "spec.ports[0].protocol = \"SCTP\": GCP L4 load balancers accept TCP and UDP, not SCTP",
        ),
        (
            "gcp",
            &mixed,
            1,
            "spec.ports = \"UDP,TCP\": GCP L4 load balancers cannot mix TCP and UDP",
        ),
        ("gcp", &no_node_ports, 0, "allocateNodePorts: false"),
        (
            "azure",
            &sctp,
            1,
            "Azure Load Balancer rules accept Tcp and Udp, not SCTP",
        ),
        ("azure", &mixed, 0, "status: ok"),
        ("aws", &sctp, 1, "a Classic ELB accepts TCP only"),
        ("aws", &mixed, 1, "mixed protocols are not supported on AWS"),
        // Baidu and Tencent: the words of `port_limits`, which their providers call too.
        (
            "baidu",
            &sctp,
            1,
            "spec.ports[0].protocol = \"SCTP\": BLB listeners are TCP or UDP, not SCTP",
        ),
        (
            "baidu",
            &mixed,
            1,
            "spec.ports[1].port = \"53\": listed twice (TCP and UDP on one port): a BLB has one \
             listener per port",
        ),
        (
            "baidu",
            &no_node_ports,
            1,
            "spec.ports[0].nodePort: a BLB forwards to node ports and this port has none",
        ),
        (
            "tencent",
            &sctp,
            1,
            "spec.ports[0].protocol = \"SCTP\": protocol SCTP is not supported by Tencent CLB",
        ),
        ("tencent", &mixed, 0, "status: ok"),
        (
            "tencent",
            &no_node_ports,
            1,
            "spec.ports[0].nodePort: no nodePort; the Tencent provider binds NodePorts",
        ),
    ];
    for (cloud, manifest, exit, needle) in cases {
        let (_dir, file) = fixture("svc.yaml", manifest);
        let assert = lint(&["-f", &file, "--cloud", cloud]).code(exit);
        let stdout = text(&assert.get_output().stdout);
        assert!(stdout.contains(needle), "{cloud}: {stdout}");
    }
}

#[test]
fn a_headless_load_balancer_is_an_error_on_every_cloud() {
    let headless = service_yaml("headless", "", "  clusterIP: None\n  ports: [{port: 80}]");
    let (_dir, file) = fixture("svc.yaml", &headless);
    for cloud in [
        "local",
        "aws",
        "gcp",
        "azure",
        "openstack",
        "tencent",
        "baidu",
    ] {
        let assert = lint(&["-f", &file, "--cloud", cloud, "-o", "json"]).code(1);
        let reports: serde_json::Value =
            serde_json::from_slice(&assert.get_output().stdout).expect("json");
        // The API server's words (its 422 says `spec.clusterIPs[0]: Invalid value: "None": …`).
        assert_eq!(
            reports[0]["errors"],
            serde_json::json!([
                "spec.clusterIPs[0] = \"None\": may not be set to 'None' for LoadBalancer services"
            ]),
            "{cloud}"
        );
    }
}

#[test]
fn a_local_load_balancer_ip_is_checked_against_the_pools() {
    let pinned = service_yaml(
        "pinned",
        "",
        "  loadBalancerIP: 10.9.0.7\n  ports: [{port: 80}]",
    );
    let (dir, file) = fixture("svc.yaml", &pinned);
    // The default pool, then --local-pool as the controller reads it (CIDR or range, comma
    // separated or repeated).
    let outside = lint(&["-f", &file, "-o", "json"]).code(1);
    let reports: serde_json::Value =
        serde_json::from_slice(&outside.get_output().stdout).expect("json");
    assert_eq!(
        reports[0]["errors"][0],
        "loadBalancerIP 10.9.0.7 is not in the local address pool (--local-pool)"
    );
    lint(&["-f", &file, "--local-pool", "10.9.0.0/24"]).code(0);
    lint(&["-f", &file, "--local-pool", "10.8.0.0/24,10.9.0.5-10.9.0.9"]).code(0);
    lint(&[
        "-f",
        &file,
        "--local-pool",
        "10.8.0.0/24",
        "--local-pool",
        "10.9.0.7-10.9.0.7",
    ])
    .code(0);
    lint(&["-f", &file, "--local-pool", "10.8.0.0/24"]).code(1);
    // Other clouds have no local pool.
    lint(&["-f", &file, "--cloud", "openstack"]).code(0);

    // IPPools among the inputs replace the --local-pool ranges, as in the controller: an
    // address outside every pool is then not the author's error (a pool may be added), so the
    // controller keeps the Service pending, and lint says so in a warning.
    let pools = |ranges: &str| {
        format!(
            "apiVersion: kube-lb.io/v1alpha1\nkind: IPPool\nmetadata: {{name: lab}}\n\
             spec: {{addresses: [\"{ranges}\"]}}\n"
        )
    };
    let holding = dir.path().join("holding.yaml");
    std::fs::write(&holding, pools("10.9.0.0/28")).expect("write");
    let holding = holding.to_str().expect("utf-8");
    let ok = lint(&["-f", &file, "-f", holding, "-o", "json"]).code(0);
    let reports: serde_json::Value = serde_json::from_slice(&ok.get_output().stdout).expect("json");
    assert_eq!(reports[0]["status"], "ok", "{reports:#}");
    assert_eq!(reports[1]["object"], "IPPool default/lab", "{reports:#}");
    let elsewhere = dir.path().join("elsewhere.yaml");
    std::fs::write(&elsewhere, pools("10.7.0.0/28")).expect("write");
    let elsewhere = elsewhere.to_str().expect("utf-8");
    let pending = lint(&["-f", elsewhere, "-f", &file, "-o", "json"]).code(0);
    let reports: serde_json::Value =
        serde_json::from_slice(&pending.get_output().stdout).expect("json");
    let warnings = reports[1]["warnings"].to_string();
    assert!(
        warnings.contains("requested address 10.9.0.7 is outside every address pool")
            && warnings.contains("pending"),
        "{reports:#}"
    );
}

#[test]
fn a_service_of_another_class_is_reported_as_not_handled() {
    let classed = service_yaml(
        "classed",
        "",
        "  loadBalancerClass: example.com/other\n  ports: [{port: 80}]",
    );
    let plain = service_yaml("plain", "", "  ports: [{port: 80}]");
    let (_dir, file) = fixture("svc.yaml", &format!("{classed}{plain}"));
    let statuses = |args: &[&str]| {
        let mut all = vec!["-f", file.as_str(), "-o", "json"];
        all.extend_from_slice(args);
        let out = lint(&all).code(0).get_output().stdout.clone();
        let reports: serde_json::Value = serde_json::from_slice(&out).expect("json");
        reports
            .as_array()
            .expect("array")
            .iter()
            .map(|r| {
                (
                    r["status"].as_str().unwrap_or_default().to_owned(),
                    r["warnings"].to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    let default = statuses(&[]);
    assert_eq!(default[0].0, "skipped");
    assert!(
        default[0]
            .1
            .contains("spec.loadBalancerClass = \\\"example.com/other\\\": not handled"),
        "{default:?}"
    );
    assert_eq!(default[1].0, "ok");
    // As the controller of that class (which then leaves unclassed Services alone, unless
    // --default-class says otherwise).
    let classed_controller = statuses(&["--load-balancer-class", "example.com/other"]);
    assert_eq!(classed_controller[0].0, "ok", "{classed_controller:?}");
    assert_eq!(classed_controller[1].0, "skipped", "{classed_controller:?}");
    let both = statuses(&[
        "--load-balancer-class",
        "example.com/other",
        "--default-class",
        "true",
    ]);
    assert_eq!((both[0].0.as_str(), both[1].0.as_str()), ("ok", "ok"));
}

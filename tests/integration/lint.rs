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

#[test]
fn golden_examples_local() {
    golden("lint-examples-local", &["-f", "examples/"]);
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
        &["-f", "examples/local/demo.yaml", "-o", "json"],
    );
}

#[test]
fn golden_judgement_fixtures_name_object_and_field() {
    // The fixtures `lint_and_reconcile_give_the_same_verdict_per_service` runs through both.
    golden("lint-judgement-local", &["-f", "tests/fixtures/judgement"]);
}

#[test]
fn golden_yaml_syntax_error_exits_2() {
    golden("lint-broken", &["-f", "tests/fixtures/broken.yaml"]);
}

#[test]
fn exit_status_follows_the_worst_object() {
    lint(&["-f", "examples/"]).code(0);
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
    ];
    for (cloud, manifest, exit, needle) in cases {
        let (_dir, file) = fixture("svc.yaml", manifest);
        let assert = lint(&["-f", &file, "--cloud", cloud]).code(exit);
        let stdout = text(&assert.get_output().stdout);
        assert!(stdout.contains(needle), "{cloud}: {stdout}");
    }
}

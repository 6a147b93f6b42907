use super::*;

fn doc(text: &str) -> Document {
    parse_ini("cloud.conf", text).expect("parses")
}

#[test]
fn values_are_unquoted_trimmed_and_comment_stripped() {
    let cases: &[(&str, &str)] = &[
        ("k = plain", "plain"),
        ("k=  spaced out  ", "spaced out"),
        ("k = v ; comment", "v"),
        ("k = v # comment", "v"),
        ("k = \"a ; b # c\"", "a ; b # c"),
        ("k = \"  padded  \"", "  padded  "),
        ("k = pre\"mid dle\"post", "premid dlepost"),
        ("k = \"q\\\"uote\"", "q\"uote"),
        ("k = \"back\\\\slash\"", "back\\slash"),
        ("k = \"a\\nb\\tc\"", "a\nb\tc"),
        ("k =", ""),
        ("k = \"\"", ""),
        ("k = https://x:5000/v3", "https://x:5000/v3"),
    ];
    for (line, want) in cases {
        let d = doc(&format!("[g]\n{line}\n"));
        assert_eq!(
            d.section("g", None).string("k").unwrap(),
            Some(*want),
            "{line}"
        );
    }
}

#[test]
fn syntax_errors_name_file_and_line() {
    let cases: &[(&str, usize, &str)] = &[
        ("k = v\n", 1, "before any [section]"),
        ("[g]\nk = \"open\n", 2, "unterminated"),
        ("[g]\n\nk = \"\\q\"\n", 3, "invalid escape"),
        ("[g]\nk = v\\\n", 2, "continuation"),
        ("[g\n", 1, "without ']'"),
        ("[g sub]\n", 1, "double-quoted"),
        ("[g] x\n", 1, "after section header"),
        ("[g]\n1k = v\n", 2, "start with a letter"),
        ("[g]\nk k = v\n", 2, "only letters"),
        ("[g]\n= v\n", 2, "empty name"),
    ];
    for (text, line, needle) in cases {
        let err = parse_ini("cloud.conf", text).expect_err(text);
        let msg = err.to_string();
        assert!(
            matches!(err, ConfigFileError::Syntax { line: l, .. } if l == *line),
            "{text:?}: {msg}"
        );
        assert!(msg.starts_with(&format!("cloud.conf:{line}:")), "{msg}");
        assert!(msg.contains(needle), "{text:?}: {msg}");
    }
}

#[test]
fn comments_blank_lines_crlf_and_bom() {
    let d = doc("\u{feff}; top\r\n# also\r\n\r\n[Global]\r\nauth-url = http://a\r\n");
    let g = d.section("global", None);
    assert_eq!(g.string("auth-url").unwrap(), Some("http://a"));
    assert_eq!(g.entries()[0].line, 5);
}

#[test]
fn names_are_case_insensitive_but_subsections_are_not() {
    let d = doc("[LoadBalancer]\nLB-Version = v2\n[LoadBalancerClass \"Fast\"]\nsubnet-id = s\n");
    assert_eq!(
        d.section("loadbalancer", None)
            .string("lb-version")
            .unwrap(),
        Some("v2")
    );
    assert_eq!(
        d.section("LOADBALANCER", None)
            .string("LB-VERSION")
            .unwrap(),
        Some("v2")
    );
    assert_eq!(
        d.section("loadbalancerclass", Some("Fast"))
            .string("subnet-id")
            .unwrap(),
        Some("s")
    );
    assert!(
        d.section("loadbalancerclass", Some("fast"))
            .entries()
            .is_empty()
    );
    assert_eq!(d.subsections("LoadBalancerClass"), vec!["Fast"]);
    assert_eq!(d.section_names(), vec!["loadbalancer", "loadbalancerclass"]);
}

#[test]
fn subsection_escapes() {
    let d = doc("[c \"a \\\"b\\\" \\\\\"]\nk = v\n");
    assert_eq!(d.subsections("c"), vec!["a \"b\" \\"]);
}

#[test]
fn bare_key_is_true_for_bool_and_an_error_for_string() {
    let d = doc("[g]\nuse-octavia\ndebug ; note\nname\n");
    let g = d.section("g", None);
    assert_eq!(g.bool("use-octavia").unwrap(), Some(true));
    assert_eq!(g.bool("debug").unwrap(), Some(true));
    let err = g.string("name").unwrap_err();
    assert!(
        matches!(
            err,
            ConfigFileError::Value {
                line: 4,
                value: None,
                ..
            }
        ),
        "{err}"
    );
    assert!(g.u32("name").is_err());
}

#[test]
fn bool_spellings() {
    for (v, want) in [
        ("true", true),
        ("YES", true),
        ("on", true),
        ("1", true),
        ("false", false),
        ("No", false),
        ("off", false),
        ("0", false),
        ("", false),
    ] {
        let d = doc(&format!("[g]\nb = {v}\n"));
        assert_eq!(d.section("g", None).bool("b").unwrap(), Some(want), "{v}");
    }
    let d = doc("[g]\nb = maybe\n");
    let err = d.section("g", None).bool("b").unwrap_err().to_string();
    assert!(
        err.starts_with("cloud.conf:2: [g] b = \"maybe\": expected a boolean"),
        "{err}"
    );
}

#[test]
fn duplicate_keys_last_wins_and_list_keeps_all() {
    let d = doc("[g]\nzone = a\nzone = b\n[h]\n[g]\nzone = c\n");
    let g = d.section("g", None);
    assert_eq!(g.string("zone").unwrap(), Some("c"));
    assert_eq!(g.list("zone").unwrap(), vec!["a", "b", "c"]);
    assert!(g.list("absent").unwrap().is_empty());
}

#[test]
fn numbers_and_ranges() {
    let d = doc("[g]\nport = 8080\nbig = 70000\nneg = -1\nu = 18446744073709551615\n");
    let g = d.section("g", None);
    assert_eq!(g.u16("port").unwrap(), Some(8080));
    assert_eq!(g.u32("big").unwrap(), Some(70000));
    let err = g.u16("big").unwrap_err().to_string();
    assert!(
        err.contains("cloud.conf:3: [g] big") && err.contains("0..=65535"),
        "{err}"
    );
    assert!(g.u64("neg").is_err());
    assert_eq!(g.u64("u").unwrap(), Some(u64::MAX));
    assert_eq!(g.u16("absent").unwrap(), None);
}

#[test]
fn durations() {
    let cases: &[(&str, Option<Duration>)] = &[
        ("30s", Some(Duration::from_secs(30))),
        ("500ms", Some(Duration::from_millis(500))),
        ("1h30m", Some(Duration::from_secs(5400))),
        ("0", Some(Duration::ZERO)),
        ("10", None),
        ("s", None),
        ("5x", None),
        ("", None),
    ];
    for (v, want) in cases {
        let d = doc(&format!("[g]\nt = {v}\n"));
        let got = d.section("g", None).duration("t");
        match want {
            Some(w) => assert_eq!(got.unwrap(), Some(*w), "{v}"),
            None => assert!(got.is_err(), "{v}"),
        }
    }
}

#[test]
fn comma_list_required_and_unknown() {
    let d = doc("[g]\nsubnets = a, b,,c \nextra = 1\n");
    let g = d.section("g", None);
    assert_eq!(g.comma_list("subnets").unwrap(), vec!["a", "b", "c"]);
    assert!(g.comma_list("absent").unwrap().is_empty());
    let err = g.required("region").unwrap_err().to_string();
    assert_eq!(err, "cloud.conf: [g] region is required");
    assert!(g.reject_unknown(&["subnets", "EXTRA"]).is_ok());
    let err = g.reject_unknown(&["subnets"]).unwrap_err().to_string();
    assert_eq!(err, "cloud.conf:3: [g] unknown key \"extra\"");
}

#[test]
fn absent_section_reads_as_empty() {
    let d = doc("[g]\n");
    assert_eq!(d.section("other", None).string("k").unwrap(), None);
}

#[test]
fn json_errors_carry_line_and_column() {
    #[derive(serde::Deserialize, Debug)]
    struct Cfg {
        #[allow(dead_code)]
        location: String,
    }
    let ok: Cfg = parse_json("azure.json", "\u{feff}{\"location\": \"x\"}").unwrap();
    assert_eq!(ok.location, "x");
    let err = parse_json::<Cfg>("azure.json", "{\n  \"location\": 3\n}").unwrap_err();
    assert!(
        matches!(err, ConfigFileError::Json { line: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().starts_with("azure.json:2:"), "{err}");
}

#[test]
fn read_names_the_file() {
    let err = read(Path::new("/nonexistent/kube-lb/cloud.conf")).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("/nonexistent/kube-lb/cloud.conf: cannot read")
    );
}

#[test]
fn header_line_is_the_first_header_naming_the_section() {
    let d = doc("; top\n[Global]\nk = v\n\n[lb \"a\"]\n[global]\nj = w\n");
    assert_eq!(d.header_line("GLOBAL", None), Some(2));
    assert_eq!(d.header_line("lb", Some("a")), Some(5));
    assert_eq!(d.header_line("lb", None), None);
    assert_eq!(d.header_line("missing", None), None);
}

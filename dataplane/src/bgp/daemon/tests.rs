use std::time::Duration;

use super::*;

fn fixture(name: &str) -> Value {
    let text = match name {
        "neighbors" => include_str!("neighbors.json"),
        "advertised" => include_str!("advertised.json"),
        "bfd" => include_str!("bfd.json"),
        _ => unreachable!("no fixture {name}"),
    };
    serde_json::from_str(text).expect("fixture is JSON")
}

#[test]
fn neighbors_as_frr_8_prints_them() {
    let neighbors = parse_neighbors(&fixture("neighbors"));
    let r1 = &neighbors[&"10.9.0.254".parse::<IpAddr>().unwrap()];
    assert_eq!(r1.description.as_deref(), Some("r1"));
    assert_eq!(r1.state, "Established");
    assert!(r1.established);
    assert_eq!(r1.last_reset.as_deref(), Some("BGP Notification received"));
}

#[test]
fn a_session_that_is_down() {
    let mut value = fixture("neighbors");
    value["10.9.0.254"]["bgpState"] = "Active".into();
    let neighbors = parse_neighbors(&value);
    let r1 = &neighbors[&"10.9.0.254".parse::<IpAddr>().unwrap()];
    assert!(!r1.established);
    assert_eq!(r1.state, "Active");
    assert!(parse_neighbors(&Value::Null).is_empty());
}

#[test]
fn advertised_routes_and_bfd_peers() {
    assert_eq!(
        parse_advertised(&fixture("advertised")),
        vec!["10.3.0.10/32".to_owned(), "10.3.0.12/32".to_owned()]
    );
    assert!(parse_advertised(&serde_json::json!({})).is_empty());
    let bfd = parse_bfd(&fixture("bfd"));
    assert_eq!(
        bfd.get(&"10.9.0.254".parse::<IpAddr>().unwrap()),
        Some(&BfdState {
            status: "up".into()
        })
    );
}

#[test]
fn status_files() {
    assert_eq!(
        parse_status("7 0\nok\n"),
        Some(ReloadStatus {
            generation: 7,
            code: 0,
            output: "ok".into()
        })
    );
    assert_eq!(
        parse_status("8 1\nline 3: % Unknown command\n").map(|s| s.code),
        Some(1)
    );
    // Being written: no complete first line yet.
    assert_eq!(parse_status("9"), None);
    assert_eq!(parse_status(""), None);
    assert_eq!(parse_status("x 0\n"), None);
}

#[test]
fn vty_answers_end_with_three_nuls_and_a_status() {
    assert_eq!(split_answer(b"hello\0\0\0\0"), Some((&b"hello"[..], 0)));
    assert_eq!(
        split_answer(b"% Unknown\0\0\0\x01"),
        Some((&b"% Unknown"[..], 1))
    );
    assert_eq!(split_answer(b"partial\0\0"), None);
    assert_eq!(split_answer(b""), None);
}

/// A stand-in daemon on a Unix socket answers in two pieces; the client reads both and
/// returns the text, or the failure with the daemon's words.
#[tokio::test]
async fn commands_over_a_vty_socket() {
    let dir = std::env::temp_dir().join(format!("klb-vty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let listener = tokio::net::UnixListener::bind(dir.join("bgpd.vty")).unwrap();
    // Like bfdd: commands other than `enable` are refused until `enable` was sent on the
    // connection; then the second one is answered (0) or refused (1).
    let server = tokio::spawn(async move {
        for status in [0u8, 1u8] {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut enabled = false;
            loop {
                let mut request = Vec::new();
                let mut byte = [0u8; 1];
                while stream.read(&mut byte).await.unwrap() == 1 && byte[0] != 0 {
                    request.push(byte[0]);
                }
                if request == b"enable" {
                    enabled = true;
                    stream.write_all(&[0, 0, 0, 0]).await.unwrap();
                    continue;
                }
                assert!(enabled, "a command before enable");
                stream.write_all(b"{\"answer\":").await.unwrap();
                stream.flush().await.unwrap();
                let rest = format!("\"{}\"}}", String::from_utf8_lossy(&request));
                stream.write_all(rest.as_bytes()).await.unwrap();
                stream.write_all(&[0, 0, 0, status]).await.unwrap();
                break;
            }
        }
    });
    let frr = Frr {
        conf_dir: dir.clone(),
        vty_dir: dir.clone(),
        reload_timeout: Duration::from_secs(1),
    };
    let answer = frr.json("bgpd", "show version json").await.unwrap();
    assert_eq!(answer["answer"], "show version json");
    let refused = frr.command("bgpd", "bogus").await.unwrap_err();
    assert!(
        matches!(refused, FrrError::Command { status: 1, .. }),
        "{refused}"
    );
    server.await.unwrap();
    let missing = frr
        .command("bfdd", "show bfd peers json")
        .await
        .unwrap_err();
    assert!(missing.to_string().contains("bfdd.vty"), "{missing}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The hand-over through files: a stand-in reloader answers the generation it saw; a
/// refusal comes back with its exit code and words; nobody answering times out naming the
/// directory.
#[tokio::test]
async fn configurations_are_handed_over_by_generation() {
    let dir = std::env::temp_dir().join(format!("klb-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let frr = Frr {
        conf_dir: dir.clone(),
        vty_dir: dir.clone(),
        reload_timeout: Duration::from_millis(500),
    };
    let timeout = frr.apply("router bgp 1\n", 1).await.unwrap_err();
    assert!(
        matches!(timeout, FrrError::ReloadTimeout { generation: 1, .. }),
        "{timeout}"
    );
    assert!(timeout.to_string().contains(&dir.display().to_string()));

    let reloader_dir = dir.clone();
    let reloader = tokio::spawn(async move {
        for code in [0, 3] {
            let generation = loop {
                let text = tokio::fs::read_to_string(reloader_dir.join(RELOAD_FILE))
                    .await
                    .unwrap_or_default();
                match text.trim().parse::<u64>() {
                    Ok(g) if g >= 2 + code as u64 / 3 => break g,
                    _ => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            };
            let config = tokio::fs::read_to_string(reloader_dir.join(CONFIG_FILE))
                .await
                .unwrap();
            tokio::fs::write(
                reloader_dir.join(STATUS_FILE),
                format!(
                    "{generation} {code}\napplied {} lines\n",
                    config.lines().count()
                ),
            )
            .await
            .unwrap();
        }
    });
    frr.apply("router bgp 1\n!\n", 2).await.unwrap();
    assert_eq!(frr.last_generation().await, Some(2));
    let refused = frr.apply("bogus\n", 3).await.unwrap_err();
    match refused {
        FrrError::ReloadFailed {
            generation,
            code,
            output,
            ..
        } => {
            assert_eq!((generation, code), (3, 3));
            assert_eq!(output, "applied 1 lines");
        }
        other => panic!("{other}"),
    }
    reloader.await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

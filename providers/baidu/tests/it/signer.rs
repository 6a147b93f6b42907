//! The signer against the official one: the same inputs are signed by `bce-python-sdk`'s
//! `bce_v1_signer` (through the project's venv, `scripts/setup-venv.sh`) and by
//! [`kube_lb_provider_baidu::sign`], and the `Authorization` values must be byte-identical.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::path::PathBuf;
use std::process::Stdio;

use kube_lb_provider_baidu::sign::{Credentials, HeadersToSign, SigningInput, authorization};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// The venv's Python (`KUBE_LB_PYTHON` overrides it).
fn python() -> PathBuf {
    match std::env::var_os("KUBE_LB_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python3"),
    }
}

struct Case {
    method: &'static str,
    path: &'static str,
    query: Vec<(String, String)>,
    headers: Vec<(String, String)>,
    timestamp: i64,
    expiration: u32,
    listed: Option<Vec<&'static str>>,
    secret: &'static str,
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn cases() -> Vec<Case> {
    let host = ("Host", "127.0.0.1:8765");
    let json_type = ("Content-Type", "application/json;charset=utf-8");
    vec![
        // Create a BLB: body headers, a client token.
        Case {
            method: "POST",
            path: "/v1/blb",
            query: pairs(&[("clientToken", "c5a7e0f2-1")]),
            headers: pairs(&[
                host,
                json_type,
                ("Content-Length", "97"),
                ("x-bce-date", "2026-11-26T04:30:00Z"),
            ]),
            timestamp: 1_795_667_400,
            expiration: 1800,
            listed: Some(vec!["content-length", "content-type", "host", "x-bce-date"]),
            secret: "b1a2c3d4e5f60718293a4b5c6d7e8f90",
        },
        // Describe by a name full of reserved characters, default signed set.
        Case {
            method: "GET",
            path: "/v1/blb",
            query: pairs(&[("name", "CCE/SVC/c-1/ns/web app"), ("exactlyMatch", "true")]),
            headers: pairs(&[
                host,
                ("x-bce-date", "2026-11-26T04:30:00Z"),
                ("User-Agent", "kube-lb"),
            ]),
            timestamp: 1_795_667_400,
            expiration: 1800,
            listed: None,
            secret: "secret with spaces/and+symbols",
        },
        // Bind an EIP: a flag parameter with no value, an STS token header.
        Case {
            method: "PUT",
            path: "/v1/eip/106.12.0.7",
            query: pairs(&[("bind", ""), ("clientToken", "t")]),
            headers: pairs(&[
                host,
                json_type,
                ("x-bce-date", "2001-02-03T04:05:06Z"),
                ("x-bce-security-token", "sts-token"),
            ]),
            timestamp: 981_173_106,
            expiration: 60,
            listed: Some(vec![
                "content-type",
                "host",
                "x-bce-date",
                "x-bce-security-token",
            ]),
            secret: "SK",
        },
        // Delete listeners by port: non-ASCII in the query, unusual expiration.
        Case {
            method: "PUT",
            path: "/v1/blb/lb-0a1b2c3d/listener",
            query: pairs(&[("batchdelete", ""), ("note", "ünïcode é")]),
            headers: pairs(&[host, ("x-bce-date", "2026-11-26T04:30:00Z")]),
            timestamp: 1_795_667_400,
            expiration: 3600,
            listed: Some(vec!["host", "x-bce-date"]),
            secret: "k",
        },
    ]
}

#[tokio::test]
async fn signatures_match_the_official_python_signer() {
    let cases = cases();
    let request: Vec<Value> = cases
        .iter()
        .map(|c| {
            json!({
                "access_key_id": "AKEXAMPLE0123",
                "secret_access_key": c.secret,
                "method": c.method,
                "path": c.path,
                "query": c.query,
                "headers": c.headers,
                "timestamp": c.timestamp,
                "expiration": c.expiration,
                "headers_to_sign": c.listed,
            })
        })
        .collect();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/bce_signer.py");
    let mut child = tokio::process::Command::new(python())
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "running {}: {e} (run scripts/setup-venv.sh)",
                python().display()
            )
        });
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(serde_json::to_string(&request).unwrap().as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    assert!(
        output.status.success(),
        "bce-python-sdk signer failed (run scripts/setup-venv.sh for bce-python-sdk): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let official: Vec<String> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(official.len(), cases.len());
    for (case, want) in cases.iter().zip(&official) {
        let credentials = Credentials {
            access_key_id: "AKEXAMPLE0123".into(),
            secret_access_key: case.secret.into(),
            session_token: None,
        };
        let input = SigningInput {
            method: case.method,
            path: case.path,
            query: &case.query,
            headers: &case.headers,
        };
        let which = match &case.listed {
            Some(names) => HeadersToSign::Listed(names),
            None => HeadersToSign::Default,
        };
        let got = authorization(&credentials, &input, case.timestamp, case.expiration, which);
        assert_eq!(&got, want, "{} {}", case.method, case.path);
    }
}

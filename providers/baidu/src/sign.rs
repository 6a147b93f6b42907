//! `bce-auth-v1`, the request signature of every Baidu Cloud (BCE) API.
//!
//! The `Authorization` header is
//! `bce-auth-v1/{accessKeyId}/{timestamp}/{expirationSeconds}/{signedHeaders}/{signature}`:
//!
//! 1. the *signing key* is the hex HMAC-SHA256 of the prefix
//!    `bce-auth-v1/{accessKeyId}/{timestamp}/{expirationSeconds}` under the secret key;
//! 2. the *canonical request* is four lines: method, the URI-encoded path (slashes kept), the
//!    sorted `key=value` query pairs (both sides URI-encoded, `authorization` left out), and the
//!    sorted `name:value` lines of the signed headers (lower-case names, trimmed values, both
//!    URI-encoded; headers with an empty value left out);
//! 3. the signature is the hex HMAC-SHA256 of the canonical request under the signing key
//!    (the key's hex text, not its bytes).
//!
//! When `signedHeaders` is empty the service signs a default set: `host`, `content-length`,
//! `content-type`, `content-md5` and every `x-bce-*` header. This module implements both forms
//! and is checked against the official `bce-python-sdk` signer (`tests/signer.rs`).

use hmac::{KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = hmac::Hmac<Sha256>;

/// The auth scheme and version, the first segment of the header.
pub const AUTH_VERSION: &str = "bce-auth-v1";

/// How long a signature stays valid, in seconds (the SDKs' default).
pub const DEFAULT_EXPIRATION_SECONDS: u32 = 1800;

/// Headers the service signs when the signed-header list is empty (besides `x-bce-*`).
pub const DEFAULT_SIGNED_HEADERS: &[&str] =
    &["host", "content-length", "content-type", "content-md5"];

/// An access key pair (and an STS session token, sent as `x-bce-security-token`).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The access key id (`AK`).
    pub access_key_id: String,
    /// The secret access key (`SK`).
    pub secret_access_key: String,
    /// A temporary session token, when the keys come from STS.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret and token never reach a log.
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Which headers a signature covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadersToSign<'a> {
    /// An empty list in the header: [`DEFAULT_SIGNED_HEADERS`] plus every `x-bce-*` header.
    Default,
    /// Exactly these (lower-case) names, listed in the header.
    Listed(&'a [&'a str]),
}

/// What is signed of one request.
#[derive(Debug, Clone, Copy)]
pub struct SigningInput<'a> {
    /// `GET`, `POST`, …
    pub method: &'a str,
    /// The path, not yet encoded (`/v1/blb/lb-1a2b3c4d`).
    pub path: &'a str,
    /// Query parameters, not yet encoded; a flag like `?bind` is `("bind", "")`.
    pub query: &'a [(String, String)],
    /// The headers the request carries, names in any case.
    pub headers: &'a [(String, String)],
}

/// URI-encodes `text` as BCE does: RFC 3986 unreserved characters stay, every other byte is
/// `%XX` (upper-case hex); `/` stays too when `keep_slash`.
pub fn uri_encode(text: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(byte));
            }
            b'/' if keep_slash => out.push('/'),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

/// `YYYY-MM-DDTHH:MM:SSZ` for a Unix time (the `x-bce-date` header and the auth timestamp).
pub fn canonical_time(unix_seconds: i64) -> String {
    let at = time::OffsetDateTime::from_unix_timestamp(unix_seconds)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

/// Parses [`canonical_time`] back into a Unix time.
pub fn parse_canonical_time(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let shape_ok = bytes.len() == 20
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes[10] == b'T'
        && bytes[13] == b':'
        && bytes[16] == b':'
        && bytes[19] == b'Z';
    if !shape_ok {
        return None;
    }
    let number = |range: std::ops::Range<usize>| text.get(range)?.parse::<u32>().ok();
    let month = time::Month::try_from(u8::try_from(number(5..7)?).ok()?).ok()?;
    let date = time::Date::from_calendar_date(
        i32::try_from(number(0..4)?).ok()?,
        month,
        u8::try_from(number(8..10)?).ok()?,
    )
    .ok()?;
    let at = date
        .with_hms(
            u8::try_from(number(11..13)?).ok()?,
            u8::try_from(number(14..16)?).ok()?,
            u8::try_from(number(17..19)?).ok()?,
        )
        .ok()?;
    Some(at.assume_utc().unix_timestamp())
}

/// The sorted, encoded query line of the canonical request.
pub fn canonical_query(query: &[(String, String)]) -> String {
    let mut pairs: Vec<String> = query
        .iter()
        .filter(|(key, _)| !key.eq_ignore_ascii_case("authorization"))
        .map(|(key, value)| format!("{}={}", uri_encode(key, false), uri_encode(value, false)))
        .collect();
    pairs.sort();
    pairs.join("&")
}

/// The sorted, encoded header lines of the canonical request, for `which` headers.
pub fn canonical_headers(headers: &[(String, String)], which: HeadersToSign<'_>) -> String {
    let mut lines: Vec<String> = headers
        .iter()
        .filter_map(|(name, value)| {
            let name = name.trim().to_ascii_lowercase();
            let value = value.trim();
            let signed = match which {
                HeadersToSign::Default => {
                    name.starts_with("x-bce-") || DEFAULT_SIGNED_HEADERS.contains(&name.as_str())
                }
                HeadersToSign::Listed(names) => names.contains(&name.as_str()),
            };
            (signed && !value.is_empty())
                .then(|| format!("{}:{}", uri_encode(&name, false), uri_encode(value, false)))
        })
        .collect();
    lines.sort();
    lines.join("\n")
}

/// The four-line canonical request.
pub fn canonical_request(input: &SigningInput<'_>, which: HeadersToSign<'_>) -> String {
    format!(
        "{}\n{}\n{}\n{}",
        input.method,
        uri_encode(input.path, true),
        canonical_query(input.query),
        canonical_headers(input.headers, which)
    )
}

fn hmac_hex(key: &[u8], message: &str) -> String {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = match HmacSha256::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable_hmac(),
    };
    mac.update(message.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

#[cold]
fn unreachable_hmac() -> ! {
    panic!("HMAC-SHA256 accepts keys of every length")
}

/// The signature (hex) of `input` for `credentials` at `unix_seconds`.
pub fn signature(
    credentials: &Credentials,
    input: &SigningInput<'_>,
    unix_seconds: i64,
    expiration_seconds: u32,
    which: HeadersToSign<'_>,
) -> String {
    let prefix = auth_prefix(&credentials.access_key_id, unix_seconds, expiration_seconds);
    let signing_key = hmac_hex(credentials.secret_access_key.as_bytes(), &prefix);
    hmac_hex(signing_key.as_bytes(), &canonical_request(input, which))
}

/// `bce-auth-v1/{ak}/{timestamp}/{expiration}`.
pub fn auth_prefix(access_key_id: &str, unix_seconds: i64, expiration_seconds: u32) -> String {
    format!(
        "{AUTH_VERSION}/{access_key_id}/{}/{expiration_seconds}",
        canonical_time(unix_seconds)
    )
}

/// The whole `Authorization` header value.
pub fn authorization(
    credentials: &Credentials,
    input: &SigningInput<'_>,
    unix_seconds: i64,
    expiration_seconds: u32,
    which: HeadersToSign<'_>,
) -> String {
    let listed = match which {
        HeadersToSign::Default => String::new(),
        HeadersToSign::Listed(names) => names.join(";"),
    };
    format!(
        "{}/{listed}/{}",
        auth_prefix(&credentials.access_key_id, unix_seconds, expiration_seconds),
        signature(credentials, input, unix_seconds, expiration_seconds, which)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_encoding_keeps_only_unreserved_characters() {
        let cases = [
            ("abc-._~XYZ019", false, "abc-._~XYZ019"),
            ("/v1/blb/lb-1", true, "/v1/blb/lb-1"),
            ("/v1/blb", false, "%2Fv1%2Fblb"),
            ("CCE/SVC/c/ns/web", false, "CCE%2FSVC%2Fc%2Fns%2Fweb"),
            ("a b+c=d&e", false, "a%20b%2Bc%3Dd%26e"),
            ("é", false, "%C3%A9"),
            (
                "application/json;charset=utf-8",
                false,
                "application%2Fjson%3Bcharset%3Dutf-8",
            ),
        ];
        for (text, keep_slash, want) in cases {
            assert_eq!(uri_encode(text, keep_slash), want, "{text}");
        }
    }

    #[test]
    fn canonical_time_round_trips() {
        for (unix, text) in [
            (0, "1970-01-01T00:00:00Z"),
            (1_700_000_000, "2023-11-14T22:13:20Z"),
        ] {
            assert_eq!(canonical_time(unix), text);
            assert_eq!(parse_canonical_time(text), Some(unix));
        }
        assert_eq!(parse_canonical_time("2023-11-14 22:13:20"), None);
    }

    #[test]
    fn default_signed_headers_cover_bce_headers_and_skip_empty_values() {
        let headers = vec![
            ("Host".to_string(), "blb.bj.baidubce.com".to_string()),
            ("x-bce-date".to_string(), "2023-11-14T22:13:20Z".to_string()),
            ("User-Agent".to_string(), "kube-lb".to_string()),
            ("Content-Type".to_string(), " ".to_string()),
        ];
        assert_eq!(
            canonical_headers(&headers, HeadersToSign::Default),
            "host:blb.bj.baidubce.com\nx-bce-date:2023-11-14T22%3A13%3A20Z"
        );
        assert_eq!(
            canonical_headers(&headers, HeadersToSign::Listed(&["host"])),
            "host:blb.bj.baidubce.com"
        );
    }

    #[test]
    fn query_is_sorted_and_authorization_left_out() {
        let query = vec![
            ("clientToken".to_string(), "t 1".to_string()),
            ("bind".to_string(), String::new()),
            ("authorization".to_string(), "x".to_string()),
        ];
        assert_eq!(canonical_query(&query), "bind=&clientToken=t%201");
    }

    /// Recorded with `tests/bce_signer.py` (the official `bce-python-sdk` 0.9.79 signer), so
    /// this check runs even where the venv is missing; `tests/signer.rs` recomputes it live.
    #[test]
    fn matches_a_recorded_official_signature() {
        let credentials = Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "SKEXAMPLE".into(),
            session_token: None,
        };
        let query = vec![("clientToken".to_string(), "token-1".to_string())];
        let headers = vec![
            ("Host".to_string(), "blb.bj.baidubce.com".to_string()),
            (
                "Content-Type".to_string(),
                "application/json;charset=utf-8".to_string(),
            ),
            ("x-bce-date".to_string(), "2023-11-14T22:13:20Z".to_string()),
        ];
        let input = SigningInput {
            method: "POST",
            path: "/v1/blb",
            query: &query,
            headers: &headers,
        };
        let got = authorization(
            &credentials,
            &input,
            1_700_000_000,
            1800,
            HeadersToSign::Listed(&["content-type", "host", "x-bce-date"]),
        );
        assert_eq!(got, RECORDED_AUTHORIZATION);
    }

    const RECORDED_AUTHORIZATION: &str = "bce-auth-v1/AKIDEXAMPLE/2023-11-14T22:13:20Z/1800/content-type;host;x-bce-date/152e50611a8a467c2c99e6a60c342f372e80673d6ff35d04109b34d8e2ba9788";
}

//! `bce-auth-v1` verification, written independently of the provider's signer so that a bug in
//! one is caught by the other (and by the official Python SDK, which signs its own requests).

use std::collections::BTreeMap;

use axum::http::{HeaderMap, Method};
use hmac::{KeyInit, Mac};
use sha2::Sha256;

use crate::state::ApiError;

/// Why a request was not authenticated.
fn refuse(status: u16, code: &str, message: impl Into<String>) -> ApiError {
    ApiError::new(status, code, message)
}

fn encode(text: &str, keep_slash: bool) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) || (keep_slash && byte == b'/') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push(u8::try_from(hi * 16 + lo).unwrap_or(b'?'));
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Splits a raw query string into decoded pairs (`bind` alone is `("bind", "")`).
pub(crate) fn query_pairs(raw: &str) -> Vec<(String, String)> {
    raw.split('&')
        .filter(|part| !part.is_empty())
        .map(|part| match part.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(part), String::new()),
        })
        .collect()
}

fn hmac_hex(key: &[u8], message: &str) -> String {
    let mut mac = match hmac::Hmac::<Sha256>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(message.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

fn parse_time(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[19] != b'Z' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| text.get(r)?.parse::<u32>().ok();
    let month = time::Month::try_from(u8::try_from(n(5..7)?).ok()?).ok()?;
    let date = time::Date::from_calendar_date(
        i32::try_from(n(0..4)?).ok()?,
        month,
        u8::try_from(n(8..10)?).ok()?,
    )
    .ok()?;
    let at = date
        .with_hms(
            u8::try_from(n(11..13)?).ok()?,
            u8::try_from(n(14..16)?).ok()?,
            u8::try_from(n(17..19)?).ok()?,
        )
        .ok()?;
    Some(at.assume_utc().unix_timestamp())
}

/// Checks the `Authorization` header of a request as BCE does: known access key, a timestamp
/// whose validity window (`expirationSeconds`, at most `max_expiration`) contains `now` (with
/// `skew` of clock tolerance), and a signature that matches the canonical request.
#[allow(clippy::too_many_arguments)]
pub(crate) fn verify(
    keys: &BTreeMap<String, String>,
    method: &Method,
    path: &str,
    raw_query: &str,
    headers: &HeaderMap,
    now: i64,
    skew: i64,
) -> Result<String, ApiError> {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            refuse(
                401,
                "AccessDenied",
                "Access denied: no Authorization header.",
            )
        })?;
    let parts: Vec<&str> = auth.splitn(6, '/').collect();
    let malformed = || {
        refuse(
            400,
            "InvalidHTTPAuthHeader",
            "The HTTP authorization header is invalid. Consult the service documentation for details.",
        )
    };
    let [version, ak, timestamp, expiration, signed, signature] = parts[..] else {
        return Err(malformed());
    };
    if version != "bce-auth-v1" {
        return Err(malformed());
    }
    let started = parse_time(timestamp).ok_or_else(malformed)?;
    let expiration: i64 = expiration.parse().map_err(|_| malformed())?;
    let Some(secret) = keys.get(ak) else {
        return Err(refuse(
            403,
            "InvalidAccessKeyId",
            "The Access Key ID you provided does not exist in our records.",
        ));
    };
    if started > now + skew || started + expiration < now - skew {
        return Err(refuse(
            400,
            "RequestExpired",
            format!("Request has expired. Timestamp date is {timestamp}."),
        ));
    }
    let listed: Vec<String> = signed
        .split(';')
        .filter(|s| !s.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    let mut lines: Vec<String> = headers
        .iter()
        .filter_map(|(name, value)| {
            let name = name.as_str().to_ascii_lowercase();
            let value = value.to_str().ok()?.trim();
            let wanted = if listed.is_empty() {
                name.starts_with("x-bce-")
                    || ["host", "content-length", "content-type", "content-md5"]
                        .contains(&name.as_str())
            } else {
                listed.contains(&name)
            };
            (wanted && !value.is_empty())
                .then(|| format!("{}:{}", encode(&name, false), encode(value, false)))
        })
        .collect();
    lines.sort();
    let mut query: Vec<String> = query_pairs(raw_query)
        .into_iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("authorization"))
        .map(|(k, v)| format!("{}={}", encode(&k, false), encode(&v, false)))
        .collect();
    query.sort();
    let canonical = format!(
        "{}\n{}\n{}\n{}",
        method.as_str(),
        encode(&decode(path), true),
        query.join("&"),
        lines.join("\n")
    );
    let prefix = format!("bce-auth-v1/{ak}/{timestamp}/{expiration}");
    let key = hmac_hex(secret.as_bytes(), &prefix);
    let expected = hmac_hex(key.as_bytes(), &canonical);
    if expected != signature {
        tracing::debug!(%canonical, "signature mismatch");
        return Err(refuse(
            400,
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. Check your Secret Access Key and signing method.",
        ));
    }
    Ok(ak.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_pairs_keep_flags_and_decode() {
        assert_eq!(
            query_pairs("bind=&clientToken=a%20b&update"),
            vec![
                ("bind".to_string(), String::new()),
                ("clientToken".to_string(), "a b".to_string()),
                ("update".to_string(), String::new()),
            ]
        );
    }

    #[test]
    fn time_parses_only_the_canonical_shape() {
        assert_eq!(parse_time("1970-01-01T00:01:00Z"), Some(60));
        assert_eq!(parse_time("1970-01-01 00:01:00Z"), None);
    }
}

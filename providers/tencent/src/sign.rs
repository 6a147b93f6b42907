//! TC3-HMAC-SHA256, the request signature of Tencent Cloud API 3.0 (reference
//! other-clouds.md §2.8): the canonical request covers the method, `/`, the `content-type` and
//! `host` headers and the SHA-256 of the exact body; the key is derived from the secret key by
//! an HMAC chain over the UTC date, the service and `tc3_request`.
//!
//! Pure: the caller passes the timestamp, so the known-answer vector is a plain unit test.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// The algorithm name, first word of `Authorization` and of the string to sign.
pub const ALGORITHM: &str = "TC3-HMAC-SHA256";

/// The headers the signature covers, in canonical order.
pub const SIGNED_HEADERS: &str = "content-type;host";

/// Everything one signature depends on.
#[derive(Debug, Clone, Copy)]
pub struct SignInput<'a> {
    /// The secret key (never logged).
    pub secret_key: &'a str,
    /// The service name in the credential scope (`clb`).
    pub service: &'a str,
    /// The `Host` header exactly as sent (`clb.tencentcloudapi.com`, `127.0.0.1:8080`).
    pub host: &'a str,
    /// The `Content-Type` header exactly as sent.
    pub content_type: &'a str,
    /// The exact body bytes.
    pub body: &'a [u8],
    /// Unix seconds, sent as `X-TC-Timestamp`.
    pub timestamp: i64,
}

/// The intermediate values of a signature (exposed so tests can compare each step).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// UTC date of the timestamp, `YYYY-MM-DD`.
    pub date: String,
    /// Lowercase hex SHA-256 of the body.
    pub body_hash: String,
    /// Lowercase hex SHA-256 of the canonical request.
    pub canonical_request_hash: String,
    /// The signature, lowercase hex.
    pub signature: String,
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn hmac(key: &[u8], message: &[u8]) -> Vec<u8> {
    // HMAC accepts keys of any length; new_from_slice cannot fail for it.
    let mut mac = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable_key_length(),
    };
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

#[cold]
fn unreachable_key_length() -> ! {
    panic!("HMAC-SHA256 accepts keys of every length")
}

/// The UTC calendar date (`YYYY-MM-DD`) of a Unix timestamp (proleptic Gregorian).
pub fn utc_date(timestamp: i64) -> String {
    let days = timestamp.div_euclid(86_400);
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Computes the signature of one request.
pub fn sign(input: &SignInput<'_>) -> Signature {
    let body_hash = sha256_hex(input.body);
    let canonical_request = format!(
        "POST\n/\n\ncontent-type:{}\nhost:{}\n\n{SIGNED_HEADERS}\n{body_hash}",
        input.content_type, input.host
    );
    let canonical_request_hash = sha256_hex(canonical_request.as_bytes());
    let date = utc_date(input.timestamp);
    let scope = format!("{date}/{}/tc3_request", input.service);
    let string_to_sign = format!(
        "{ALGORITHM}\n{}\n{scope}\n{canonical_request_hash}",
        input.timestamp
    );
    let date_key = hmac(
        format!("TC3{}", input.secret_key).as_bytes(),
        date.as_bytes(),
    );
    let service_key = hmac(&date_key, input.service.as_bytes());
    let signing_key = hmac(&service_key, b"tc3_request");
    let signature = hex::encode(hmac(&signing_key, string_to_sign.as_bytes()));
    Signature {
        date,
        body_hash,
        canonical_request_hash,
        signature,
    }
}

/// The `Authorization` header value for `secret_id` and a computed signature.
pub fn authorization(secret_id: &str, service: &str, signature: &Signature) -> String {
    format!(
        "{ALGORITHM} Credential={secret_id}/{}/{service}/tc3_request, SignedHeaders={SIGNED_HEADERS}, Signature={}",
        signature.date, signature.signature
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_known_answer_vector() {
        // other-clouds.md §2.8, verified there with the official Python SDK's Sign.sign_tc3.
        let got = sign(&SignInput {
            secret_key: "testsecretkey",
            service: "clb",
            host: "clb.tencentcloudapi.com",
            content_type: "application/json",
            body: br#"{"Limit":1}"#,
            timestamp: 1_700_000_000,
        });
        assert_eq!(got.date, "2023-11-14");
        assert_eq!(
            got.body_hash,
            "55522f708dcfebccb7bd3e8d0001a53ecaf2beca9ca801f1e9161e24215faa99"
        );
        assert_eq!(
            got.canonical_request_hash,
            "afbafce6c3c33d463e67f66b996b8dc4183342c89b090c574ec42b6baa42d7fc"
        );
        assert_eq!(
            got.signature,
            "58e4902b8680cc8a2552434772712e334f4618a37479f1f4ed2e1f139bdde36a"
        );
    }

    #[test]
    fn utc_dates_cross_days_months_and_leap_years() {
        let cases = [
            (0, "1970-01-01"),
            (86_399, "1970-01-01"),
            (86_400, "1970-01-02"),
            (951_782_400, "2000-02-29"),
            (1_709_164_800, "2024-02-29"),
            (1_709_251_199, "2024-02-29"),
            (1_709_251_200, "2024-03-01"),
            (1_735_689_599, "2024-12-31"),
            (1_735_689_600, "2025-01-01"),
        ];
        for (timestamp, want) in cases {
            assert_eq!(utc_date(timestamp), want, "{timestamp}");
        }
    }

    #[test]
    fn authorization_header_has_the_sdk_shape() {
        let signature = Signature {
            date: "2023-11-14".into(),
            body_hash: String::new(),
            canonical_request_hash: String::new(),
            signature: "abc".into(),
        };
        assert_eq!(
            authorization("AKIDEXAMPLE", "clb", &signature),
            "TC3-HMAC-SHA256 Credential=AKIDEXAMPLE/2023-11-14/clb/tc3_request, SignedHeaders=content-type;host, Signature=abc"
        );
    }
}

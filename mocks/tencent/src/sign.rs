//! The server side of TC3-HMAC-SHA256: parse `Authorization`, recompute the signature from
//! the headers and body as received, and answer with the error code Tencent Cloud uses.
//! Written independently of the provider's signer so each checks the other.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// A parsed `Authorization: TC3-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// The SecretId.
    pub secret_id: String,
    /// The date of the credential scope.
    pub date: String,
    /// The service of the credential scope.
    pub service: String,
    /// `content-type;host` (the only set the SDKs sign).
    pub signed_headers: String,
    /// Hex signature.
    pub signature: String,
}

/// Parses the header; `None` when it is not a TC3 authorization.
pub fn parse_authorization(header: &str) -> Option<Authorization> {
    let rest = header.strip_prefix("TC3-HMAC-SHA256 ")?;
    let mut credential = None;
    let mut signed_headers = None;
    let mut signature = None;
    for part in rest.split(',') {
        let (key, value) = part.trim().split_once('=')?;
        match key {
            "Credential" => credential = Some(value),
            "SignedHeaders" => signed_headers = Some(value),
            "Signature" => signature = Some(value),
            _ => return None,
        }
    }
    let mut scope = credential?.split('/');
    let secret_id = scope.next()?.to_string();
    let date = scope.next()?.to_string();
    let service = scope.next()?.to_string();
    if scope.next()? != "tc3_request" || scope.next().is_some() {
        return None;
    }
    Some(Authorization {
        secret_id,
        date,
        service,
        signed_headers: signed_headers?.to_string(),
        signature: signature?.to_string(),
    })
}

fn hmac(key: &[u8], message: &[u8]) -> Vec<u8> {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        // HMAC takes keys of every length.
        return Vec::new();
    };
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

/// UTC `YYYY-MM-DD` of a Unix timestamp.
pub fn utc_date(timestamp: i64) -> String {
    // Civil-from-days over the proleptic Gregorian calendar, era by era.
    let z = timestamp.div_euclid(86_400) + 719_468;
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

/// The signature a correct client computes for these inputs (lowercase hex).
pub fn expected_signature(
    secret_key: &str,
    service: &str,
    content_type: &str,
    host: &str,
    body: &[u8],
    timestamp: i64,
) -> String {
    let canonical = format!(
        "POST\n/\n\ncontent-type:{content_type}\nhost:{host}\n\ncontent-type;host\n{}",
        hex::encode(Sha256::digest(body))
    );
    let date = utc_date(timestamp);
    let to_sign = format!(
        "TC3-HMAC-SHA256\n{timestamp}\n{date}/{service}/tc3_request\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let k_date = hmac(format!("TC3{secret_key}").as_bytes(), date.as_bytes());
    let k_service = hmac(&k_date, service.as_bytes());
    let k_signing = hmac(&k_service, b"tc3_request");
    hex::encode(hmac(&k_signing, to_sign.as_bytes()))
}

/// Builds a complete `Authorization` value (for tests that talk to the mock directly).
pub fn authorization_header(
    secret_id: &str,
    secret_key: &str,
    content_type: &str,
    host: &str,
    body: &[u8],
    timestamp: i64,
) -> String {
    format!(
        "TC3-HMAC-SHA256 Credential={secret_id}/{}/clb/tc3_request, SignedHeaders=content-type;host, Signature={}",
        utc_date(timestamp),
        expected_signature(secret_key, "clb", content_type, host, body, timestamp)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproduces_the_reference_vector() {
        assert_eq!(
            expected_signature(
                "testsecretkey",
                "clb",
                "application/json",
                "clb.tencentcloudapi.com",
                br#"{"Limit":1}"#,
                1_700_000_000
            ),
            "58e4902b8680cc8a2552434772712e334f4618a37479f1f4ed2e1f139bdde36a"
        );
    }

    #[test]
    fn parses_only_well_formed_authorizations() {
        let good = "TC3-HMAC-SHA256 Credential=AKID/2023-11-14/clb/tc3_request, SignedHeaders=content-type;host, Signature=ab";
        let parsed = parse_authorization(good).expect("well-formed");
        assert_eq!(parsed.secret_id, "AKID");
        assert_eq!(parsed.date, "2023-11-14");
        assert_eq!(parsed.service, "clb");
        for bad in [
            "HMAC-SHA256 Credential=AKID/2023-11-14/clb/tc3_request, SignedHeaders=content-type;host, Signature=ab",
            "TC3-HMAC-SHA256 Credential=AKID/2023-11-14/clb, SignedHeaders=content-type;host, Signature=ab",
            "TC3-HMAC-SHA256 Credential=AKID/2023-11-14/clb/tc3_request, Signature=ab",
            "TC3-HMAC-SHA256 Credential=AKID/2023-11-14/clb/tc3_request/x, SignedHeaders=content-type;host, Signature=ab",
        ] {
            assert_eq!(parse_authorization(bad), None, "{bad}");
        }
    }
}

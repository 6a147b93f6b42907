//! The webhook's serving certificate: PEM files (a `kubernetes.io/tls` Secret mounted into
//! the Pod, re-read when the kubelet updates them, so a rotated certificate is served without
//! a restart), or a self-signed one made at start for a webhook beside the embedded API server.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Why no certificate could be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("reading {path}")]
    Read {
        /// Which file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no usable PEM certificate chain or private key.
    #[error("{path}: {reason}")]
    Pem {
        /// Which file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration")]
    Config(#[from] rustls::Error),
    /// The self-signed certificate could not be made.
    #[error("making a self-signed certificate")]
    Generate(#[from] rcgen::Error),
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// A certificate chain and key as rustls signs with them.
pub fn certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_path: &Path,
    key_path: &Path,
) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Pem {
            path: cert_path.to_owned(),
            reason: format!("not a PEM certificate chain: {e}"),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Pem {
            path: cert_path.to_owned(),
            reason: "no CERTIFICATE block".into(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::Pem {
        path: key_path.to_owned(),
        reason: format!("no PEM private key: {e}"),
    })?;
    let signer =
        rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| TlsError::Pem {
            path: key_path.to_owned(),
            reason: format!("unusable private key: {e}"),
        })?;
    let certified = CertifiedKey::new(chain, signer);
    certified.keys_match().map_err(|_| TlsError::Pem {
        path: key_path.to_owned(),
        reason: format!(
            "the key does not belong to the certificate in {}",
            cert_path.display()
        ),
    })?;
    Ok(certified)
}

/// How often the files are looked at again for a new certificate.
const RELOAD_CHECK: Duration = Duration::from_secs(10);

/// Serves the certificate in two files, re-read when either changes.
#[derive(Debug)]
pub struct FileCertificate {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    modified: (Option<SystemTime>, Option<SystemTime>),
    checked: Instant,
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl FileCertificate {
    /// Reads both files now; an error here stops the webhook from starting.
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Self, TlsError> {
        let key = certified_key(&read(cert_path)?, &read(key_path)?, cert_path, key_path)?;
        Ok(FileCertificate {
            cert_path: cert_path.to_owned(),
            key_path: key_path.to_owned(),
            current: Mutex::new(Loaded {
                key: Arc::new(key),
                modified: (modified(cert_path), modified(key_path)),
                checked: Instant::now(),
            }),
        })
    }

    fn reload_if_changed(&self, loaded: &mut Loaded) {
        loaded.checked = Instant::now();
        let now = (modified(&self.cert_path), modified(&self.key_path));
        if now == loaded.modified {
            return;
        }
        let fresh = read(&self.cert_path).and_then(|cert| {
            certified_key(
                &cert,
                &read(&self.key_path)?,
                &self.cert_path,
                &self.key_path,
            )
        });
        match fresh {
            Ok(key) => {
                tracing::info!(cert = %self.cert_path.display(), "serving the renewed certificate");
                loaded.key = Arc::new(key);
                loaded.modified = now;
            }
            // Half-written during an update: keep the old one, look again at the next check.
            Err(error) => {
                tracing::warn!(%error, "the certificate files changed but cannot be used; serving the previous certificate")
            }
        }
    }
}

impl ResolvesServerCert for FileCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut loaded = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if loaded.checked.elapsed() >= RELOAD_CHECK {
            self.reload_if_changed(&mut loaded);
        }
        Some(loaded.key.clone())
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// rustls' server configuration for `resolver`, HTTP/1.1 only.
pub fn server_config(resolver: Arc<dyn ResolvesServerCert>) -> Result<Arc<ServerConfig>, TlsError> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A self-signed certificate and its key, PEM.
#[derive(Debug, Clone)]
pub struct SelfSigned {
    /// The certificate, which is also the CA bundle clients trust.
    pub cert_pem: String,
    /// Its private key.
    pub key_pem: String,
}

/// Makes a self-signed certificate for `names` (DNS names or IP addresses).
pub fn self_signed(names: &[String]) -> Result<SelfSigned, TlsError> {
    let made = rcgen::generate_simple_self_signed(names.to_vec())?;
    Ok(SelfSigned {
        cert_pem: made.cert.pem(),
        key_pem: made.key_pair.serialize_pem(),
    })
}

/// A resolver that always serves one certificate.
#[derive(Debug)]
pub struct FixedCertificate(pub Arc<CertifiedKey>);

impl ResolvesServerCert for FixedCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_certificate_loads_and_a_wrong_key_is_named() {
        let one = self_signed(&["localhost".into(), "127.0.0.1".into()]).unwrap();
        let other = self_signed(&["localhost".into()]).unwrap();
        let (cert, key) = (Path::new("tls.crt"), Path::new("tls.key"));
        assert!(certified_key(one.cert_pem.as_bytes(), one.key_pem.as_bytes(), cert, key).is_ok());
        let error = certified_key(one.cert_pem.as_bytes(), other.key_pem.as_bytes(), cert, key)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("tls.key") && error.contains("does not belong"),
            "{error}"
        );
        let error = certified_key(b"garbage", one.key_pem.as_bytes(), cert, key)
            .unwrap_err()
            .to_string();
        assert!(error.contains("tls.crt"), "{error}");
        let error = certified_key(one.cert_pem.as_bytes(), b"", cert, key)
            .unwrap_err()
            .to_string();
        assert!(error.contains("tls.key"), "{error}");
    }

    #[test]
    fn renewed_files_are_served_after_the_next_check() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let first = self_signed(&["localhost".into()]).unwrap();
        std::fs::write(&cert, &first.cert_pem).unwrap();
        std::fs::write(&key, &first.key_pem).unwrap();
        let served = FileCertificate::load(&cert, &key).unwrap();
        let der = |s: &FileCertificate| s.current.lock().unwrap().key.cert[0].to_vec();
        let before = der(&served);
        let second = self_signed(&["localhost".into()]).unwrap();
        std::fs::write(&cert, &second.cert_pem).unwrap();
        std::fs::write(&key, &second.key_pem).unwrap();
        // Make the change visible even on a file system with coarse timestamps.
        let later = SystemTime::now() + Duration::from_secs(5);
        for path in [&cert, &key] {
            std::fs::File::options()
                .write(true)
                .open(path)
                .unwrap()
                .set_modified(later)
                .unwrap();
        }
        let mut loaded = served.current.lock().unwrap();
        served.reload_if_changed(&mut loaded);
        drop(loaded);
        assert_ne!(der(&served), before);
        // A half-written pair keeps the previous certificate.
        std::fs::write(&key, "").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&key)
            .unwrap()
            .set_modified(later + Duration::from_secs(5))
            .unwrap();
        let kept = der(&served);
        let mut loaded = served.current.lock().unwrap();
        served.reload_if_changed(&mut loaded);
        drop(loaded);
        assert_eq!(der(&served), kept);
    }
}

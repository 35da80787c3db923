//! TLS and mutual TLS for the v2 fronts (issue 27, item 3: "binding any
//! other address needs an explicit config choice and either a bearer token
//! or mutual TLS"), on rustls with its ring provider.
//!
//! `kserve.tls_cert` and `kserve.tls_key` (PEM) make both fronts speak TLS
//! only; `kserve.tls_client_ca` (PEM, one or more CA certificates) makes
//! them require a client certificate that chains to one of those CAs
//! (rustls's `WebPkiClientVerifier`: RFC 5280 path validation, the client
//! auth EKU, validity dates). A client without one fails the handshake and
//! never reaches HTTP or gRPC. A verified client certificate counts as the
//! client's credentials for every operation but the admin ones (model load
//! and unload), which still need the token ([`super::Access`]).
//!
//! ALPN: the HTTP front offers `http/1.1` and the gRPC front `h2`, which
//! gRPC's own clients require of a TLS server (gRPC's
//! doc/PROTOCOL-HTTP2.md: "TLS … ALPN h2").
//!
//! The handshake is bounded by `kserve.header_read_timeout_ms`
//! ([`handshake`]): a client that trickles its ClientHello or never
//! answers the server's flight holds its connection slot no longer than a
//! client trickling an HTTP header.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// PEM files are small: a chain or a CA bundle of a few certificates.
/// Larger is refused rather than read (reef_model::files' bounded read).
pub const MAX_PEM_BYTES: u64 = 1 << 20;

/// The TLS settings of the fronts, loaded and checked.
#[derive(Debug, Clone)]
pub struct Tls {
    /// The server config of the HTTP front (ALPN `http/1.1`).
    pub http: Arc<rustls::ServerConfig>,
    /// The server config of the gRPC front (ALPN `h2`).
    pub grpc: Arc<rustls::ServerConfig>,
    /// Whether clients must present a certificate from `tls_client_ca`.
    pub client_auth: bool,
    /// The files, for messages.
    pub cert: PathBuf,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_pem(path: &Path, what: &'static str) -> Result<Vec<u8>, String> {
    reef_model::files::read(path, what, MAX_PEM_BYTES).map_err(|e| e.to_string())
}

/// Loads the server's certificate chain and key, and the client CAs if
/// given, into the two fronts' server configs.
pub fn load(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<Tls, String> {
    let pem = read_pem(cert, "TLS certificate (kserve.tls_cert)")?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("kserve.tls_cert = {cert:?}: not PEM certificates: {e}"))?;
    if chain.is_empty() {
        return Err(format!(
            "kserve.tls_cert = {cert:?} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
        ));
    }
    let pem = read_pem(key, "TLS private key (kserve.tls_key)")?;
    let key_der = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        format!("kserve.tls_key = {key:?}: no PEM private key (PKCS#8, PKCS#1 or SEC1): {e}")
    })?;
    let verifier = match client_ca {
        None => None,
        Some(ca) => {
            let pem = read_pem(ca, "TLS client CA bundle (kserve.tls_client_ca)")?;
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&pem) {
                let c = c.map_err(|e| {
                    format!("kserve.tls_client_ca = {ca:?}: not PEM certificates: {e}")
                })?;
                roots.add(c).map_err(|e| {
                    format!(
                        "kserve.tls_client_ca = {ca:?}: a certificate is not usable as a CA: {e}"
                    )
                })?;
            }
            if roots.is_empty() {
                return Err(format!(
                    "kserve.tls_client_ca = {ca:?} holds no PEM certificate"
                ));
            }
            Some(
                rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider(),
                )
                .build()
                .map_err(|e| format!("kserve.tls_client_ca = {ca:?}: {e}"))?,
            )
        }
    };
    let config = |alpn: &[u8]| -> Result<Arc<rustls::ServerConfig>, String> {
        let b = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let b = match &verifier {
            Some(v) => b.with_client_cert_verifier(Arc::clone(v)),
            None => b.with_no_client_auth(),
        };
        let mut c = b
            .with_single_cert(chain.clone(), key_der.clone_key())
            .map_err(|e| {
                format!("kserve.tls_cert = {cert:?} and kserve.tls_key = {key:?} do not make a usable pair: {e}")
            })?;
        c.alpn_protocols = vec![alpn.to_vec()];
        Ok(Arc::new(c))
    };
    Ok(Tls {
        http: config(b"http/1.1")?,
        grpc: config(b"h2")?,
        client_auth: verifier.is_some(),
        cert: cert.to_path_buf(),
    })
}

/// Runs the server side of a handshake on `io` within `within`. Returns the
/// TLS stream and whether the client presented a certificate the server
/// verified.
pub async fn handshake<S>(
    config: Arc<rustls::ServerConfig>,
    io: S,
    within: Duration,
) -> std::io::Result<(tokio_rustls::server::TlsStream<S>, bool)>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    match tokio::time::timeout(within, acceptor.accept(io)).await {
        Ok(Ok(s)) => {
            let verified = s
                .get_ref()
                .1
                .peer_certificates()
                .is_some_and(|c| !c.is_empty());
            Ok((s, verified))
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the TLS handshake did not complete within kserve.header_read_timeout_ms",
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::Path;

    /// A CA, and a server certificate and key it issued, in `dir`.
    fn files(dir: &Path) {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca =
            rcgen::CertifiedIssuer::self_signed(p, rcgen::KeyPair::generate().unwrap()).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.join("s.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("s.key"), key.serialize_pem()).unwrap();
        std::fs::write(dir.join("empty.pem"), "").unwrap();
    }

    /// A non-loopback address needs `allow_remote` and a token or mutual
    /// TLS: server-only TLS is not a credential. Bad files are named.
    #[test]
    fn remote_binds_take_mutual_tls_instead_of_a_token() {
        let dir = tempfile::tempdir().unwrap();
        files(dir.path());
        let p = |n: &str| dir.path().join(n);
        let cfg = |extra: String| {
            // Config::parse validates, kserve() included.
            Config::parse(
                &format!("[kserve]\nhttp = \"10.1.2.3:8000\"\nallow_remote = true\n{extra}"),
                Path::new("x.toml"),
            )
            .and_then(|c| c.kserve())
        };
        let tls = format!("tls_cert = {:?}\ntls_key = {:?}\n", p("s.pem"), p("s.key"));
        let e = cfg(tls.clone()).unwrap_err().to_string();
        assert!(e.contains("mutual TLS"), "{e}");
        let o = cfg(format!("{tls}tls_client_ca = {:?}\n", p("ca.pem"))).unwrap();
        let t = o.tls.expect("TLS is set");
        assert!(t.client_auth);
        assert_eq!(t.http.alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert_eq!(t.grpc.alpn_protocols, vec![b"h2".to_vec()]);
        assert!(o.access.token.is_none());
        for (extra, says) in [
            (
                format!(
                    "tls_cert = {:?}\ntls_key = {:?}\n",
                    p("empty.pem"),
                    p("s.key")
                ),
                "holds no PEM certificate",
            ),
            (
                format!("tls_cert = {:?}\ntls_key = {:?}\n", p("s.pem"), p("s.pem")),
                "no PEM private key",
            ),
            (
                format!("{tls}tls_client_ca = {:?}\n", p("empty.pem")),
                "holds no PEM certificate",
            ),
            (
                format!("tls_cert = {:?}\ntls_key = {:?}\n", p("s.pem"), dir.path()),
                "directory",
            ),
        ] {
            let e = cfg(extra.clone()).unwrap_err().to_string();
            assert!(e.contains(says), "{extra}: {e}");
        }
    }
}

//! The v2 fronts over TLS and mutual TLS (issue 27, item 3;
//! docs/kserve.md "TLS"): Triton's own client over HTTPS and gRPC with TLS
//! and a client certificate, the refusal of a client without one or with
//! one from another CA, and the slow-sender rules over TLS: a handshake
//! that trickles, a connection idle after its handshake, and a TLS record
//! trickled a byte at a time.
//!
//! Certificates are made here by rcgen: a CA, a server certificate for
//! 127.0.0.1 and localhost, a client certificate from the CA, and one from
//! a CA the daemon does not know.

mod common;

use common::{free_ports, Daemon};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOKEN: &str = "test-token-0123456789abcdef";

struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn ca(name: &str) -> rcgen::CertifiedIssuer<'static, rcgen::KeyPair> {
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    p.distinguished_name
        .push(rcgen::DnType::CommonName, name.to_string());
    rcgen::CertifiedIssuer::self_signed(p, rcgen::KeyPair::generate().unwrap()).unwrap()
}

/// Writes NAME.pem and NAME.key: a leaf certificate for `sans` issued by
/// `issuer` for `usage`.
fn leaf(
    dir: &Path,
    name: &str,
    sans: &[&str],
    usage: rcgen::ExtendedKeyUsagePurpose,
    issuer: &rcgen::Issuer<'_, rcgen::KeyPair>,
) {
    let mut p =
        rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, name.to_string());
    p.extended_key_usages = vec![usage];
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, issuer).unwrap();
    std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let ours = ca("reef test CA");
    let theirs = ca("someone else's CA");
    std::fs::write(dir.path().join("ca.pem"), ours.pem()).unwrap();
    use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
    leaf(
        dir.path(),
        "server",
        &["localhost", "127.0.0.1"],
        ServerAuth,
        &ours,
    );
    leaf(dir.path(), "client", &["reef-client"], ClientAuth, &ours);
    leaf(dir.path(), "stranger", &["stranger"], ClientAuth, &theirs);
    Pki { dir }
}

struct Fronts {
    d: Daemon,
    http: String,
    grpc: String,
}

/// reefd on sim:mi50 with both fronts over TLS; mutual if `mutual`.
fn start(pki: &Pki, mutual: bool, extra: &str) -> Fronts {
    let [h, g] = free_ports();
    let (http, grpc) = (format!("127.0.0.1:{h}"), format!("127.0.0.1:{g}"));
    let client_ca = if mutual {
        format!("tls_client_ca = {:?}\n", pki.path("ca.pem"))
    } else {
        String::new()
    };
    let d = Daemon::start_full(
        "sim:mi50",
        "",
        "",
        &format!(
            "[kserve]\nhttp = {http:?}\ngrpc = {grpc:?}\ntoken = {TOKEN:?}\n\
             tls_cert = {:?}\ntls_key = {:?}\n{client_ca}{extra}",
            pki.path("server.pem"),
            pki.path("server.key"),
        ),
    );
    assert!(
        TcpStream::connect(&http).is_ok(),
        "HTTP front not listening; log:\n{}",
        d.log()
    );
    Fronts { d, http, grpc }
}

fn certs(path: &Path) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_file_iter(path)
        .unwrap()
        .map(|c| c.unwrap())
        .collect()
}

/// A rustls client config trusting the test CA, presenting `client`'s
/// certificate if given, offering `alpn`.
fn client_config(pki: &Pki, client: Option<&str>, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(&pki.path("ca.pem")) {
        roots.add(c).unwrap();
    }
    let b = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let mut c = match client {
        None => b.with_no_client_auth(),
        Some(name) => b
            .with_client_auth_cert(
                certs(&pki.path(&format!("{name}.pem"))),
                rustls::pki_types::PrivateKeyDer::from_pem_file(pki.path(&format!("{name}.key")))
                    .unwrap(),
            )
            .unwrap(),
    };
    c.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(c)
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TLS connection to `addr`, its handshake done.
fn connect(addr: &str, config: Arc<rustls::ClientConfig>) -> std::io::Result<Tls> {
    let sock = TcpStream::connect(addr)?;
    sock.set_read_timeout(Some(Duration::from_secs(20)))?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(config, name).map_err(std::io::Error::other)?;
    let mut s = rustls::StreamOwned::new(conn, sock);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(s)
}

/// GET `path` over HTTPS; the status, or the error that ended it.
fn https_get(addr: &str, config: Arc<rustls::ClientConfig>, path: &str) -> Result<u16, String> {
    let mut s = connect(addr, config).map_err(|e| e.to_string())?;
    if let Err(e) = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .and_then(|_| s.flush())
    {
        // The server may have sent its alert and closed already: read it.
        let mut b = [0u8; 1];
        return Err(match s.read(&mut b) {
            Err(r) => format!("{r} (writing: {e})"),
            Ok(_) => e.to_string(),
        });
    }
    let mut out = Vec::new();
    // A close without close_notify after the answer is still an answer.
    let r = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    match text.split_whitespace().nth(1) {
        Some(code) if text.starts_with("HTTP/1.1") => Ok(code.parse().unwrap()),
        _ => Err(format!("no answer ({r:?}): {text}")),
    }
}

/// Whether the server closes `s` (end of stream or a reset) within
/// `within`, and after how long.
fn closed_within(s: &mut TcpStream, within: Duration) -> (bool, Duration) {
    s.set_read_timeout(Some(within)).unwrap();
    let t0 = Instant::now();
    let mut sink = [0u8; 4096];
    loop {
        match s.read(&mut sink) {
            Ok(0) => return (true, t0.elapsed()),
            Ok(_) => continue,
            Err(e) => {
                let timed_out = matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                );
                return (!timed_out, t0.elapsed());
            }
        }
    }
}

/// Whether an error is the server refusing the handshake: its alert, or
/// (when it closed before the client wrote, and its reset dropped the
/// alert) the closed connection.
fn refused(e: &str) -> bool {
    let e = e.to_lowercase();
    ["alert", "broken pipe", "reset"]
        .iter()
        .any(|w| e.contains(w))
}

fn venv_python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python")
}

/// tritonclient (sync and asyncio, HTTP and gRPC) with a client
/// certificate runs the whole of kserve_client.py over mutual TLS: health,
/// metadata, load and unload (refused without the token: a certificate
/// does not stand for it there), inference at priorities 1, 0 and 10,
/// statistics, shared memory. Without a client certificate, or with one
/// from another CA, the handshake fails over both fronts.
#[test]
fn tritonclient_over_https_and_grpc_tls_with_a_client_certificate() {
    let pki = pki();
    let f = start(&pki, true, "");
    let py = venv_python();
    assert!(
        py.is_file(),
        "run scripts/setup.sh: it installs .venv with tritonclient"
    );
    let out = Command::new(&py)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kserve_client.py"))
        .args([&f.http, &f.grpc, TOKEN, "vgg"])
        .env("REEF_TLS_CA", pki.path("ca.pem"))
        .env("REEF_TLS_CERT", pki.path("client.pem"))
        .env("REEF_TLS_KEY", pki.path("client.key"))
        .env("REEF_TLS_STRANGER_CERT", pki.path("stranger.pem"))
        .env("REEF_TLS_STRANGER_KEY", pki.path("stranger.key"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "tritonclient over TLS failed:\n{stdout}\n{}\nreefd log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        f.d.log()
    );
    for refusal in [
        "https, no client certificate refused",
        "grpc tls, no client certificate refused",
        "https, another CA's client certificate refused",
        "grpc tls, another CA's client certificate refused",
    ] {
        assert!(stdout.contains(refusal), "{refusal} missing:\n{stdout}");
    }
}

/// The same refusals from a client that shows what failed: rustls, with
/// no certificate or another CA's, sees the handshake refused (TLS 1.3
/// sends the server's verdict after the client's Finished, so the first
/// read fails); with ours it is answered. Plain HTTP to the TLS port gets
/// no answer either.
#[test]
fn mutual_tls_refuses_clients_without_a_certificate_from_the_ca() {
    let pki = pki();
    let f = start(&pki, true, "");
    let h2 = b"h2".as_slice();
    let h1 = b"http/1.1".as_slice();
    assert_eq!(
        https_get(
            &f.http,
            client_config(&pki, Some("client"), h1),
            "/v2/health/live"
        ),
        Ok(200)
    );
    for who in [None, Some("stranger")] {
        let r = https_get(&f.http, client_config(&pki, who, h1), "/v2/health/live");
        let e = r.expect_err("answered without a client certificate from the CA");
        assert!(refused(&e), "{who:?}: {e}");
        // gRPC: the handshake, or the first read after it, gets the alert.
        let r = connect(&f.grpc, client_config(&pki, who, h2)).and_then(|mut s| {
            s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")?;
            s.flush()?;
            let mut b = [0u8; 64];
            s.read(&mut b)
        });
        assert!(
            matches!(&r, Err(e) if refused(&e.to_string())),
            "{who:?}: gRPC gave {r:?}"
        );
    }
    // Plain HTTP to the TLS port.
    let mut s = TcpStream::connect(&f.http).unwrap();
    s.write_all(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    assert!(
        !String::from_utf8_lossy(&out).contains("HTTP/1.1 200"),
        "plain HTTP was served on the TLS port"
    );
    // Server-only TLS is not mutual: a loopback client without a
    // certificate is served, and load still needs the token.
    let g = start(&pki, false, "");
    assert_eq!(
        https_get(&g.http, client_config(&pki, None, h1), "/v2/health/live"),
        Ok(200)
    );
}

/// A handshake that trickles (a ClientHello a byte every 200 ms), one that
/// never starts, a connection idle after its handshake, and (gRPC) a TLS
/// record trickled after it: each is closed once the header timeout
/// passes, and with `max_connections = 2` held by two of them a third
/// client is served once they are cut off.
#[test]
fn tls_clients_that_trickle_are_cut_off_and_free_their_slots() {
    let pki = pki();
    let f = start(
        &pki,
        true,
        "max_connections = 2\nheader_read_timeout_ms = 1000\nbody_read_timeout_ms = 1000\n",
    );
    let cfg = |alpn: &[u8]| client_config(&pki, Some("client"), alpn);
    // A ClientHello's record header and its first bytes (TLS 1.2 record
    // version, a 512-byte record), trickled.
    let hello: Vec<u8> = [
        0x16u8, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ]
    .into_iter()
    .chain(std::iter::repeat(7u8))
    .take(100)
    .collect();
    for addr in [&f.http, &f.grpc] {
        for trickle in [false, true] {
            // Two of them hold both slots.
            let holders: Vec<_> = (0..2)
                .map(|_| {
                    let mut s = TcpStream::connect(addr).unwrap();
                    let w = s.try_clone().unwrap();
                    let hello = hello.clone();
                    let writer = std::thread::spawn(move || {
                        let mut w = w;
                        if trickle {
                            for b in hello {
                                if w.write_all(&[b]).is_err() {
                                    break;
                                }
                                std::thread::sleep(Duration::from_millis(200));
                            }
                        }
                    });
                    let reader =
                        std::thread::spawn(move || closed_within(&mut s, Duration::from_secs(15)));
                    (writer, reader)
                })
                .collect();
            std::thread::sleep(Duration::from_millis(300));
            // A third client waits in the backlog until they are cut off.
            let t0 = Instant::now();
            if addr == &f.http {
                assert_eq!(
                    https_get(addr, cfg(b"http/1.1"), "/v2/health/live"),
                    Ok(200)
                );
            } else {
                connect(addr, cfg(b"h2")).expect("a third gRPC client's handshake");
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the third client waited {:?}",
                t0.elapsed()
            );
            for (w, r) in holders {
                let (closed, after) = r.join().unwrap();
                assert!(
                    closed && after < Duration::from_millis(4_500),
                    "{addr} (trickle {trickle}): a handshake was not cut off: closed {closed} after {after:?}"
                );
                w.join().unwrap();
            }
        }
        // Idle after the handshake: HTTP's header timer, gRPC's preface.
        let alpn = if addr == &f.http {
            b"http/1.1".as_slice()
        } else {
            b"h2".as_slice()
        };
        let mut s = connect(addr, cfg(alpn)).unwrap();
        let (closed, after) = closed_within(&mut s.sock, Duration::from_secs(15));
        assert!(
            closed && after < Duration::from_millis(4_500),
            "{addr}: idle after the handshake: closed {closed} after {after:?}"
        );
    }
    // gRPC: the preface, then a TLS record trickled beneath rustls: its
    // header says 64 bytes, they come a byte every 200 ms.
    let mut s = connect(&f.grpc, cfg(b"h2")).unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    s.flush().unwrap();
    let raw = s.sock.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let mut raw = raw;
        for b in [0x17u8, 0x03, 0x03, 0x00, 0x40]
            .into_iter()
            .chain([0u8; 64])
        {
            if raw.write_all(&[b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let (closed, after) = closed_within(&mut s.sock, Duration::from_secs(20));
    assert!(
        closed && after < Duration::from_millis(4_500),
        "a trickled TLS record: closed {closed} after {after:?}"
    );
    writer.join().unwrap();
    assert_eq!(
        https_get(&f.http, cfg(b"http/1.1"), "/v2/health/ready"),
        Ok(200)
    );
}

//! The Open Inference Protocol fronts (issue 27, docs/kserve.md) against an
//! independent client: Triton's `tritonclient` from PyPI, over HTTP and
//! gRPC, sync and async (reefd/tests/kserve_client.py), plus the refusals
//! a hostile or mistaken client meets, spoken as raw HTTP so nothing in a
//! client library smooths them over.

mod common;

use common::{free_ports, Daemon};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const TOKEN: &str = "test-token-0123456789abcdef";

struct Fronts {
    d: Daemon,
    http: String,
    grpc: String,
}

fn start(device: &str, extra: &str) -> Fronts {
    start_full(device, "", extra)
}

fn start_full(device: &str, device_extra: &str, extra: &str) -> Fronts {
    let [h, g] = free_ports();
    let http = format!("127.0.0.1:{h}");
    let grpc = format!("127.0.0.1:{g}");
    let d = Daemon::start_full(
        device,
        "",
        device_extra,
        &format!("[kserve]\nhttp = {http:?}\ngrpc = {grpc:?}\ntoken = {TOKEN:?}\n{extra}"),
    );
    // The fronts come up before the daemon reports ready.
    assert!(
        TcpStream::connect(&http).is_ok(),
        "HTTP front not listening; log:\n{}",
        d.log()
    );
    Fronts { d, http, grpc }
}

/// One HTTP/1.1 request; returns (status, headers, body).
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&out[..split]).to_string();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut body = out[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    (status, head, body)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let nl = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let n = usize::from_str_radix(std::str::from_utf8(&b[..nl]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[nl + 2..nl + 2 + n]);
        b = &b[nl + 2 + n + 2..];
    }
}

fn error_of(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(body)));
    v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error field: {v}"))
        .to_string()
}

fn venv_python() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python")
}

/// Runs kserve_client.py against `f` on `model` (and a reference ONNX).
fn tritonclient(f: &Fronts, model: &str, reference: Option<&Path>) {
    let py = venv_python();
    assert!(
        py.is_file(),
        "run scripts/setup.sh: it installs .venv with tritonclient"
    );
    let mut cmd = Command::new(&py);
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kserve_client.py"))
        .args([&f.http, &f.grpc, TOKEN, model]);
    if let Some(r) = reference {
        cmd.arg(r);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "tritonclient checks failed:\n{stdout}\n{}\nreefd log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        f.d.log()
    );
    f.d.check_nothing_left().unwrap_or_else(|e| panic!("{e}"));
}

/// A measured schedule without tensors on the simulated MI50.
#[test]
fn tritonclient_over_http_and_grpc_sync_and_async() {
    let f = start("sim:mi50", "");
    tritonclient(&f, "vgg", None);
}

/// cuda:0 on the simulated libcuda, with tensors: reef-libcuda-sim's test
/// model (input `x` float32 [2048], output `y`), its outputs the same
/// through JSON, binary data and shared memory, and for the same input.
#[test]
fn tritonclient_with_tensors_on_cuda0() {
    let _g = common::cuda_serial();
    let lib = common::sim_library();
    let models = common::two_kernel_dir().parent().unwrap().to_path_buf();
    let f = start_full(
        "cuda:0",
        &format!("cuda_library = {lib:?}\nmodels_dir = {models:?}"),
        "",
    );
    tritonclient(&f, "two-kernel", None);
}

/// sim:h100 with real values (the CPU build of reef-compile's kernels):
/// tritonclient's answers equal ONNX Runtime's on the same inputs.
#[test]
fn tritonclient_on_sim_h100_equals_onnx_runtime() {
    let t = common::compiled_tiny(1);
    let models = t.path().join("models");
    let f = start_full("sim:h100", &format!("models_dir = {models:?}"), "");
    tritonclient(&f, "tiny", Some(&t.path().join("tiny.onnx")));
}

#[test]
fn bad_requests_get_the_protocols_errors_and_the_daemon_goes_on() {
    let f = start("sim:mi50", "max_body_bytes = 65536\n");
    let admin = [("Authorization", &*format!("Bearer {TOKEN}"))];
    let (s, _, b) = http(&f.http, "POST", "/v2/repository/models/vgg/load", &[], b"");
    assert_eq!(s, 401, "{}", String::from_utf8_lossy(&b));
    assert!(error_of(&b).contains("token"));
    let (s, _, b) = http(
        &f.http,
        "POST",
        "/v2/repository/models/vgg/load",
        &[("Authorization", "Bearer wrong-token-wrong-token")],
        b"",
    );
    assert_eq!(s, 401, "{}", String::from_utf8_lossy(&b));
    let (s, _, b) = http(
        &f.http,
        "POST",
        "/v2/repository/models/vgg/load",
        &admin,
        b"",
    );
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
    let (s, _, b) = http(
        &f.http,
        "POST",
        "/v2/repository/models/..%2Fetc/load",
        &admin,
        b"",
    );
    assert!(s == 400 || s == 404, "{s} {}", String::from_utf8_lossy(&b));

    let infer = "/v2/models/vgg/infer";
    // Malformed JSON.
    let (s, _, b) = http(&f.http, "POST", infer, &[], b"{\"inputs\": [");
    assert_eq!(s, 400);
    assert!(error_of(&b).contains("not valid JSON"), "{}", error_of(&b));
    // A body over the limit.
    let big = vec![b' '; 70_000];
    let (s, _, _) = http(&f.http, "POST", infer, &[], &big);
    assert_eq!(s, 413);
    // A binary_data_size that disagrees with the body.
    let head = br#"{"inputs":[{"name":"x","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}}]}"#;
    let mut body = head.to_vec();
    body.extend_from_slice(&[0u8; 4]);
    let len = head.len().to_string();
    let (s, _, b) = http(
        &f.http,
        "POST",
        infer,
        &[("Inference-Header-Content-Length", &len)],
        &body,
    );
    assert_eq!(s, 400);
    assert!(
        error_of(&b).contains("only 4 bytes of binary data remain"),
        "{}",
        error_of(&b)
    );
    let (s, _, b) = http(
        &f.http,
        "POST",
        infer,
        &[("Inference-Header-Content-Length", "99999")],
        &body,
    );
    assert_eq!(s, 400);
    assert!(
        error_of(&b).contains("Inference-Header-Content-Length"),
        "{}",
        error_of(&b)
    );
    // A wrong datatype or shape.
    let (s, _, b) = http(
        &f.http,
        "POST",
        infer,
        &[],
        br#"{"inputs":[{"name":"x","datatype":"STRING","shape":[1],"data":["a"]}]}"#,
    );
    assert_eq!(s, 400);
    assert!(error_of(&b).contains("STRING"), "{}", error_of(&b));
    let (s, _, b) = http(
        &f.http,
        "POST",
        infer,
        &[],
        br#"{"inputs":[{"name":"x","datatype":"FP32","shape":[3],"data":[1,2]}]}"#,
    );
    assert_eq!(s, 400);
    assert!(
        error_of(&b).contains("2 elements but its shape says 3"),
        "{}",
        error_of(&b)
    );
    // An unknown model or version.
    let (s, _, b) = http(
        &f.http,
        "POST",
        "/v2/models/nope/infer",
        &[],
        br#"{"inputs":[]}"#,
    );
    assert_eq!(s, 404);
    assert!(error_of(&b).contains("not loaded"), "{}", error_of(&b));
    let (s, _, b) = http(&f.http, "GET", "/v2/models/vgg/versions/7", &[], b"");
    assert_eq!(s, 404);
    assert!(error_of(&b).contains("only version 1"), "{}", error_of(&b));
    // Shared memory that is unknown, or a region past its object's end.
    let (s, _, b) = http(
        &f.http,
        "POST",
        infer,
        &[],
        br#"{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"parameters":{"shared_memory_region":"nope","shared_memory_byte_size":4}}]}"#,
    );
    assert_eq!(s, 400);
    assert!(
        error_of(&b).contains("register it first"),
        "{}",
        error_of(&b)
    );
    let key = format!("reef_kserve_test_{}", std::process::id());
    let obj = Path::new("/dev/shm").join(&key);
    std::fs::write(&obj, [0u8; 64]).unwrap();
    let reg = format!(r#"{{"key":"/{key}","offset":0,"byte_size":128}}"#);
    let (s, _, b) = http(
        &f.http,
        "POST",
        "/v2/systemsharedmemory/region/r/register",
        &[],
        reg.as_bytes(),
    );
    assert_eq!(s, 400);
    assert!(error_of(&b).contains("does not fit"), "{}", error_of(&b));
    let reg = format!(r#"{{"key":"/{key}","offset":0,"byte_size":64}}"#);
    let (s, _, _) = http(
        &f.http,
        "POST",
        "/v2/systemsharedmemory/region/r/register",
        &[],
        reg.as_bytes(),
    );
    assert_eq!(s, 200);
    let (s, _, b) = http(
        &f.http,
        "POST",
        infer,
        &[],
        br#"{"inputs":[{"name":"x","datatype":"FP32","shape":[4],"parameters":{"shared_memory_region":"r","shared_memory_offset":56,"shared_memory_byte_size":16}}]}"#,
    );
    assert_eq!(s, 400);
    assert!(error_of(&b).contains("past its end"), "{}", error_of(&b));
    let (s, _, _) = http(
        &f.http,
        "POST",
        "/v2/systemsharedmemory/unregister",
        &[],
        b"",
    );
    assert_eq!(s, 200);
    std::fs::remove_file(&obj).unwrap();
    // The daemon is unaffected: a good request is served.
    let (s, _, b) = http(
        &f.http,
        "POST",
        infer,
        &[],
        br#"{"inputs":[],"parameters":{"priority":1}}"#,
    );
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
    let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(v["model_name"], "vgg");
    f.d.check_nothing_left().unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn non_loopback_binds_need_allow_remote_and_a_token() {
    let dir = tempfile::tempdir().unwrap();
    for (section, words) in [
        ("[kserve]\nhttp = \"0.0.0.0:18000\"\n", "allow_remote"),
        (
            "[kserve]\nhttp = \"0.0.0.0:18000\"\nallow_remote = true\n",
            "token",
        ),
        (
            "[kserve]\nhttp = \"127.0.0.1:1\"\ntoken = \"short\"\n",
            "16 characters",
        ),
        ("[kserve]\ngrpc = \"localhost\"\n", "not an address"),
    ] {
        let cfg = dir.path().join("reefd.toml");
        std::fs::write(&cfg, section).unwrap();
        let out = Command::new(common::reefd_bin())
            .args(["start", "--foreground", "--config"])
            .arg(&cfg)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{section} was accepted");
        assert!(err.contains(words), "{section}: {err}");
    }
}

#[test]
fn a_timeout_fails_requests_that_wait_and_never_runs_them() {
    let f = start("sim:mi50", "");
    let admin = [("Authorization", &*format!("Bearer {TOKEN}"))];
    let (s, _, _) = http(
        &f.http,
        "POST",
        "/v2/repository/models/vgg/load",
        &admin,
        b"",
    );
    assert_eq!(s, 200);
    // Eight RT requests at once share the front's one RT stream: the first
    // reaches the GPU at once, the others wait behind it (VGG runs for
    // milliseconds on sim:mi50) and their 200 us timeout passes.
    let before = f.d.client().stats().unwrap().tasks_completed;
    let addr = f.http.clone();
    let answers: Vec<(u16, Vec<u8>)> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let addr = addr.clone();
                sc.spawn(move || {
                    let (s, _, b) = http(
                        &addr,
                        "POST",
                        "/v2/models/vgg/infer",
                        &[],
                        br#"{"inputs":[],"parameters":{"priority":1,"timeout":200}}"#,
                    );
                    (s, b)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok = answers.iter().filter(|(s, _)| *s == 200).count();
    let timed_out: Vec<_> = answers.iter().filter(|(s, _)| *s == 503).collect();
    assert!(ok >= 1, "{answers:?}");
    assert!(!timed_out.is_empty(), "no request timed out: {answers:?}");
    for (_, b) in &timed_out {
        assert!(error_of(b).contains("timeout passed"), "{}", error_of(b));
    }
    assert_eq!(ok + timed_out.len(), 8, "{answers:?}");
    // The timed-out requests never ran.
    let stats = f.d.client().stats().unwrap();
    assert_eq!(stats.tasks_completed - before, ok as u64);
}

/// Slow senders (issue 27, "Load"): with two connection slots held by two
/// clients that trickle a request header a byte every 200 ms, a third
/// client is still served, because the header timeout closes the
/// tricklers and frees their slots (without it they hold them for as long
/// as they trickle); a client that sends a header and only part of its
/// body is answered 408.
#[test]
fn slow_senders_are_cut_off_and_free_their_connection_slots() {
    let f = start(
        "sim:mi50",
        "max_connections = 2\nheader_read_timeout_ms = 1000\nbody_read_timeout_ms = 1000\n",
    );
    let trickle_for = Duration::from_secs(15);
    let tricklers: Vec<_> = (0..2)
        .map(|_| {
            let mut s = TcpStream::connect(&f.http).unwrap();
            let mut r = s.try_clone().unwrap();
            let writer = std::thread::spawn(move || {
                let t0 = std::time::Instant::now();
                let head = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Slow: ";
                for &b in head.iter().chain(std::iter::repeat(&b'a')) {
                    if t0.elapsed() > trickle_for || s.write_all(&[b]).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            });
            let reader = std::thread::spawn(move || {
                r.set_read_timeout(Some(trickle_for + Duration::from_secs(5)))
                    .unwrap();
                let t0 = std::time::Instant::now();
                let mut sink = Vec::new();
                // Closed: end of stream or a reset (bytes the client
                // trickled after the close), not the read timing out.
                let closed = match r.read_to_end(&mut sink) {
                    Ok(_) => true,
                    Err(e) => !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
                };
                (closed, t0.elapsed())
            });
            (writer, reader)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (s, _, _) = http(&f.http, "GET", "/v2/health/live", &[], b"");
    assert_eq!(
        s, 200,
        "a third client is served once the slow ones are cut off"
    );
    for (w, r) in tricklers {
        let (closed, after) = r.join().unwrap();
        assert!(
            closed && after < trickle_for,
            "a trickling client was not cut off while it trickled (closed {closed} after {after:?})"
        );
        w.join().unwrap();
    }
    // A header, then 1 byte of a 100-byte body.
    let mut s = TcpStream::connect(&f.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"POST /v2/models/vgg/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("body_read_timeout_ms"), "{text}");
    // gRPC: a connection that sends nothing, and one that trickles the
    // HTTP/2 preface a byte every 200 ms (24 bytes: 4.8 s), are closed
    // once the header timeout passes without a whole preface.
    for trickle in [false, true] {
        let mut s = TcpStream::connect(&f.grpc).unwrap();
        let mut r = s.try_clone().unwrap();
        r.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let writer = std::thread::spawn(move || {
            if trickle {
                for &b in b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" {
                    if s.write_all(&[b]).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
            std::thread::sleep(Duration::from_secs(6));
        });
        let mut sink = Vec::new();
        let t0 = std::time::Instant::now();
        // Closed: end of stream or a reset, not the read timing out.
        let closed = match r.read_to_end(&mut sink) {
            Ok(_) => true,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        };
        assert!(
            // Before the trickled preface would be complete (4.8 s).
            closed && t0.elapsed() < Duration::from_millis(4_500),
            "gRPC connection (trickle {trickle}) not closed by the preface deadline: {:?}",
            t0.elapsed()
        );
        writer.join().unwrap();
    }
    // The daemon goes on.
    let (s, _, _) = http(&f.http, "GET", "/v2/health/ready", &[], b"");
    assert_eq!(s, 200);
}

/// An HTTP/2 frame (RFC 9113 §4.1).
/// A client that pipelines requests and never reads the answers (issue
/// 27, "Load": one slow client never stalls the others): hyper stops
/// reading while an answer waits for the socket, so without a bound on a
/// pending write the client holds its connection slot for ever. With one
/// slot (`max_connections = 1`) held that way, a second client is served
/// once `body_read_timeout_ms` has passed with the first one's answer
/// pending, and the first finds its connection closed before all its
/// requests were answered.
#[test]
fn a_client_that_never_reads_its_answers_is_cut_off() {
    let f = start(
        "sim:mi50",
        "max_connections = 1\nheader_read_timeout_ms = 60000\nbody_read_timeout_ms = 1000\n",
    );
    let mut s = TcpStream::connect(&f.http).unwrap();
    let req = b"GET /v2 HTTP/1.1\r\nHost: x\r\n\r\n";
    // Enough pipelined requests for their answers (server metadata, a few
    // hundred bytes each) to fill both sockets' buffers many times over;
    // the client's own writes block once the server stops reading.
    s.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut sent = 0usize;
    let t0 = std::time::Instant::now();
    while sent < 400_000 && t0.elapsed() < Duration::from_secs(20) {
        if s.write_all(req).is_err() {
            break;
        }
        sent += 1;
    }
    // The slot is freed: a second client is answered.
    let t1 = std::time::Instant::now();
    let (st, _, _) = http(&f.http, "GET", "/v2/health/live", &[], b"");
    assert_eq!(st, 200);
    eprintln!(
        "{sent} requests pipelined; the second client answered after {:?}",
        t1.elapsed()
    );
    // The first connection was closed with requests unanswered.
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    let closed = match s.read_to_end(&mut got) {
        Ok(_) => true,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    };
    let answered = got.windows(12).filter(|w| w == b"HTTP/1.1 200").count();
    assert!(closed, "the non-reading client's connection stayed open");
    assert!(
        answered < sent,
        "all {sent} pipelined requests were answered: the client was not cut off"
    );
}

fn h2_frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut v = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, ty, flags];
    v.extend_from_slice(&stream.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// The types of the whole frames in `b`, which begins at a frame.
fn h2_frame_types(mut b: &[u8]) -> Vec<u8> {
    let mut types = Vec::new();
    while b.len() >= 9 {
        let n = (b[0] as usize) << 16 | (b[1] as usize) << 8 | b[2] as usize;
        types.push(b[3]);
        b = &b[(9 + n).min(b.len())..];
    }
    types
}

/// The HEADERS block of a gRPC ModelInfer call, in HPACK (RFC 7541):
/// indexed `:method POST` and `:scheme http`, then literals without
/// indexing for `:path`, `:authority`, `content-type` and `te`.
fn grpc_infer_headers() -> Vec<u8> {
    fn lit(out: &mut Vec<u8>, s: &str) {
        out.push(s.len() as u8);
        out.extend_from_slice(s.as_bytes());
    }
    let mut h = vec![0x83, 0x86, 0x04];
    lit(&mut h, "/inference.GRPCInferenceService/ModelInfer");
    h.push(0x01);
    lit(&mut h, "x");
    h.extend_from_slice(&[0x0f, 0x10]);
    lit(&mut h, "application/grpc");
    h.push(0x00);
    lit(&mut h, "te");
    lit(&mut h, "trailers");
    h
}

/// gRPC connections past their preface (issue 27, "slow senders"): one
/// that trickles a frame a byte at a time, and one that opens a ModelInfer
/// call and sends its body a 1-byte DATA frame at a time, are closed by the
/// frame and request deadlines (`header_read_timeout_ms`,
/// `body_read_timeout_ms`), long before they stop trickling; an idle one
/// is sent GOAWAY at `grpc_max_connection_age_ms` and closed after its
/// grace. The lower bounds show the close came from the deadline, not from
/// a protocol error in the hand-made frames.
#[test]
fn grpc_clients_that_trickle_after_the_preface_are_cut_off() {
    let f = start(
        "sim:mi50",
        "header_read_timeout_ms = 1000\nbody_read_timeout_ms = 1500\n\
         grpc_max_connection_age_ms = 3000\ngrpc_max_connection_age_grace_ms = 2000\n",
    );
    let trickle_for = Duration::from_secs(12);
    for case in ["frame", "request", "idle"] {
        let mut s = TcpStream::connect(&f.grpc).unwrap();
        let mut r = s.try_clone().unwrap();
        r.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut opening = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        opening.extend(h2_frame(0x4, 0, 0, &[]));
        if case == "request" {
            opening.extend(h2_frame(0x1, 0x4, 1, &grpc_infer_headers()));
        }
        s.write_all(&opening).unwrap();
        let t0 = std::time::Instant::now();
        let writer = std::thread::spawn(move || {
            let drip: Vec<u8> = match case {
                // A PING frame, one byte every 200 ms.
                "frame" => h2_frame(0x6, 0, 0, &[0; 8]),
                // A 5-byte gRPC message prefix then its payload, one
                // 1-byte DATA frame every 200 ms.
                "request" => (0..64).flat_map(|_| h2_frame(0x0, 0, 1, &[0])).collect(),
                _ => Vec::new(),
            };
            let step = if case == "frame" { 1 } else { 10 };
            for chunk in drip.chunks(step) {
                if t0.elapsed() > trickle_for || s.write_all(chunk).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            // The SETTINGS acknowledgement a client owes, then silence.
            let _ = s.write_all(&h2_frame(0x4, 0x1, 0, &[]));
            std::thread::sleep(Duration::from_secs(6));
        });
        let mut got = Vec::new();
        let closed = match r.read_to_end(&mut got) {
            Ok(_) => true,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        };
        let after = t0.elapsed();
        let types = h2_frame_types(&got);
        eprintln!("gRPC {case}: closed {closed} after {after:?}, frames {types:?}");
        let (lo, hi) = match case {
            "frame" => (900, 4_000),
            "request" => (1_400, 4_500),
            _ => (2_900, 6_000),
        };
        assert!(
            closed && after >= Duration::from_millis(lo) && after < Duration::from_millis(hi),
            "{case}: closed {closed} after {after:?}, expected within {lo}..{hi} ms"
        );
        // GOAWAY (0x7) only for the connection that aged out; the others
        // were cut, not refused for a protocol error.
        assert_eq!(types.contains(&0x7), case == "idle", "{case}: {types:?}");
        writer.join().unwrap();
    }
    // The daemon goes on, over gRPC too.
    tritonclient(&f, "vgg", None);
}

/// A ModelStreamInfer session longer than the request deadline (issue 27,
/// the review of e530908): tritonclient's gRPC stream keeps its request
/// half open for the session, sending a request every 300 ms for 4 s
/// against `body_read_timeout_ms = 1000`; the server has answered the call
/// (its HEADERS), so the request rule no longer applies, and every request
/// is answered on the one connection.
#[test]
fn a_grpc_stream_outlives_the_request_deadline() {
    let f = start(
        "sim:mi50",
        "header_read_timeout_ms = 1000\nbody_read_timeout_ms = 1000\n",
    );
    let script = r#"
import os, sys, time, queue
import tritonclient.grpc as g
url, token = sys.argv[1], sys.argv[2]
try:
    c = g.InferenceServerClient(url)
    c.load_model("vgg", headers={"authorization": f"Bearer {token}"})
    got = queue.Queue()
    c.start_stream(callback=lambda result, error: got.put(error))
    n = 0
    t0 = time.time()
    while time.time() - t0 < 4.0:
        c.async_stream_infer("vgg", [], priority=10)
        n += 1
        time.sleep(0.3)
    errors = [got.get(timeout=20) for _ in range(n)]
    c.stop_stream()
    bad = [str(e) for e in errors if e is not None]
    print(f"stream: {n} requests over {time.time() - t0:.1f} s, {len(bad)} errors: {bad[:3]}", flush=True)
    os._exit(1 if bad else 0)
except Exception as e:
    print(f"stream: failed: {e!r}", flush=True)
    os._exit(1)
"#;
    let out = Command::new(venv_python())
        .args(["-c", script, &f.grpc, TOKEN])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert!(
        out.status.success() && stdout.contains(", 0 errors"),
        "the stream was cut:\n{stdout}\n{}\nreefd log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        f.d.log()
    );
}

/// Open descriptors of process `pid`.
fn fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// 1000 connections held open at once (issue 27, "Load"): the front keeps
/// serving, and once they close the daemon's descriptors return to what
/// they were (nothing leaked per connection).
#[test]
fn a_thousand_open_connections_are_served_and_leave_nothing_behind() {
    // Idle connections are not cut off by the header timeout during the
    // test (default 10 s), however slowly a loaded machine accepts them.
    let f = start("sim:mi50", "header_read_timeout_ms = 600000\n");
    let pid = f.d.pid();
    let (s, _, _) = http(&f.http, "GET", "/v2/health/live", &[], b"");
    assert_eq!(s, 200);
    let before = fds(pid);
    let conns: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(&f.http).expect("connect"))
        .collect();
    // Every connection is accepted (the limit is 1024): the daemon holds
    // one descriptor for each.
    let mut held = 0;
    for _ in 0..1200 {
        held = fds(pid);
        // (`before` may count a connection of the previous request that
        // is still closing: a few descriptors of slack.)
        if held + 10 >= before + 1000 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        held + 10 >= before + 1000,
        "{held} descriptors, {before} before"
    );
    let (s, _, _) = http(&f.http, "GET", "/v2/health/ready", &[], b"");
    assert_eq!(s, 200, "served beside 1000 open connections");
    drop(conns);
    let mut after = usize::MAX;
    for _ in 0..1200 {
        after = fds(pid);
        if after <= before {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        after <= before,
        "{after} descriptors after, {before} before"
    );
}

//! Where the round trip of one request goes, step by step, over the
//! native socket and over gRPC (issue 27: what the gRPC front adds to an
//! RT request). Every stamp is CLOCK_MONOTONIC in ns
//! ([`reefd::protocol::monotonic_ns`]), one clock for the bench and the
//! daemon: the native answer's [`reefd::protocol::Timeline`] and latency,
//! the gRPC answer's `reef_timeline` parameters (docs/kserve.md, "Where
//! the round trip goes").

pub use reefd::kserve::grpc::pb;
use reefd::metrics::summarize;
use std::time::Instant;

/// The steps of one round trip, in us, in the order of [`NATIVE_STEPS`]
/// or [`GRPC_STEPS`].
pub type Steps = Vec<f64>;

const NATIVE_STEPS: [&str; 6] = [
    "client encode + write",
    "socket to daemon read",
    "daemon (arrival to done)",
    "done to seen",
    "seen to writer (handoff)",
    "write + client read/decode",
];

const GRPC_STEPS: [&str; 8] = [
    "client to daemon's last read",
    "read to service entry",
    "front: request to native",
    "daemon (arrival to done)",
    "done to seen",
    "seen to front (handoff)",
    "front: answer to response",
    "encode + h2 + client decode",
];

fn us(a: u64, b: u64) -> f64 {
    (b as f64 - a as f64) / 1e3
}

/// The native answer's stamps: the client's send, the daemon's arrival
/// (its completion less its latency), completion, the daemon seeing it,
/// its writer taking the answer, the client's receipt.
pub fn native(r: &reefd::protocol::TaskResult, c0: u64, sent: u64, c1: u64) -> Steps {
    let tl = r.timeline.as_deref().copied().unwrap_or_default();
    let arrival = tl.done_ns.saturating_sub((r.latency_us * 1e3) as u64);
    vec![
        us(c0, sent),
        us(sent, arrival),
        us(arrival, tl.done_ns),
        us(tl.done_ns, tl.seen_ns),
        us(tl.seen_ns, tl.written_ns),
        us(tl.written_ns, c1),
    ]
}

/// The gRPC answer's `reef_timeline` stamps (docs/kserve.md, "Where the
/// round trip goes") on the client's time line.
pub fn grpc(r: &pb::ModelInferResponse, c0: u64, c1: u64) -> Steps {
    let t = |k: &str| stamp(r, k);
    let (read, entered, called, done, seen, answered, built) = (
        t("reef_read_ns"),
        t("reef_entered_ns"),
        t("reef_called_ns"),
        t("reef_done_ns"),
        t("reef_seen_ns"),
        t("reef_answered_ns"),
        t("reef_built_ns"),
    );
    vec![
        us(c0, read),
        us(read, entered),
        us(entered, called),
        us(called, done),
        us(done, seen),
        us(seen, answered),
        us(answered, built),
        us(built, c1),
    ]
}

/// The answer's `reef_timeline` stamp `k` (0: absent).
pub fn stamp(r: &pb::ModelInferResponse, k: &str) -> u64 {
    match r.parameters.get(k).and_then(|p| p.parameter_choice.clone()) {
        Some(pb::infer_parameter::ParameterChoice::Uint64Param(x)) => x,
        _ => 0,
    }
}

/// Prints the median and mean of each of `rows`' columns, named `names`.
pub fn show(names: &[&str], rows: &[Steps]) {
    let mut total = 0.0;
    for (k, name) in names.iter().enumerate() {
        let s = summarize(rows.iter().map(|r| r[k]));
        total += s.mean_us;
        println!("  {:<30} {:>9.1} {:>9.1}", name, s.p50_us, s.mean_us);
    }
    println!("  {:<30} {:>9} {:>9.1}", "sum of means", "", total);
}

/// Prints the median and mean of each step of both paths, and what
/// protobuf's encoding and decoding of this request and answer cost on
/// their own (prost, the code tonic runs on both sides), so the steps
/// that hold them can be split.
pub fn breakdown(
    native: &[Steps],
    grpc: &[(&str, &[Steps])],
    last: Option<&pb::ModelInferResponse>,
    request: &dyn Fn() -> pb::ModelInferRequest,
) {
    use prost::Message;
    println!("  where the round trip goes (us; stamps on CLOCK_MONOTONIC):");
    println!("  {:<30} {:>9} {:>9}", "step", "p50", "mean");
    println!("  native RT:");
    show(&NATIVE_STEPS, native);
    for (name, rows) in grpc {
        println!("  {name}:");
        show(&GRPC_STEPS, rows);
    }
    let req = request();
    let n = 200;
    let time = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        for _ in 0..n {
            f();
        }
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    };
    let bytes = req.encode_to_vec();
    let enc = time(&mut || {
        std::hint::black_box(request().encode_to_vec());
    });
    let dec = time(&mut || {
        std::hint::black_box(pb::ModelInferRequest::decode(bytes.as_slice()).unwrap());
    });
    print!(
        "  prost alone: request ({} bytes) built + encoded {enc:.1} us, decoded {dec:.1} us",
        bytes.len()
    );
    if let Some(r) = last {
        let rb = r.encode_to_vec();
        let renc = time(&mut || {
            std::hint::black_box(r.encode_to_vec());
        });
        let rdec = time(&mut || {
            std::hint::black_box(pb::ModelInferResponse::decode(rb.as_slice()).unwrap());
        });
        print!(
            "; answer ({} bytes) encoded {renc:.1} us, decoded {rdec:.1} us",
            rb.len()
        );
    }
    println!();
}

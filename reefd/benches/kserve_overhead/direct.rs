//! A bare HTTP/2 connection as a gRPC transport: hyper's `SendRequest`
//! behind tower's `Service`, which tonic's generated client takes in place
//! of its `Channel`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::codegen::http;

#[derive(Clone)]
pub struct Direct(pub hyper::client::conn::http2::SendRequest<tonic::body::Body>);

impl tower::Service<http::Request<tonic::body::Body>> for Direct {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.0.send_request(req))
    }
}

/// When the bare connection's socket calls returned, for one request at a
/// time: the first and last write that moved bytes and the first and last
/// read that brought some, with their counts (ns of CLOCK_MONOTONIC, the
/// clock of the daemon's stamps), so the client's share of each HTTP/2
/// direction splits from the socket's and the daemon's.
#[derive(Default)]
pub struct Io {
    writes: AtomicU64,
    first_write: AtomicU64,
    last_write: AtomicU64,
    reads: AtomicU64,
    first_read: AtomicU64,
    last_read: AtomicU64,
}

/// One request's socket calls, as [`Io`] saw them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Calls {
    pub writes: u64,
    pub first_write: u64,
    pub last_write: u64,
    pub reads: u64,
    pub first_read: u64,
    pub last_read: u64,
}

pub static IO: Io = Io {
    writes: AtomicU64::new(0),
    first_write: AtomicU64::new(0),
    last_write: AtomicU64::new(0),
    reads: AtomicU64::new(0),
    first_read: AtomicU64::new(0),
    last_read: AtomicU64::new(0),
};

impl Io {
    /// Starts a request: forgets the previous one's calls.
    pub fn reset(&self) {
        for a in [
            &self.writes,
            &self.first_write,
            &self.last_write,
            &self.reads,
            &self.first_read,
            &self.last_read,
        ] {
            a.store(0, Relaxed);
        }
    }

    /// The calls since [`Io::reset`].
    pub fn take(&self) -> Calls {
        Calls {
            writes: self.writes.load(Relaxed),
            first_write: self.first_write.load(Relaxed),
            last_write: self.last_write.load(Relaxed),
            reads: self.reads.load(Relaxed),
            first_read: self.first_read.load(Relaxed),
            last_read: self.last_read.load(Relaxed),
        }
    }

    fn note(&self, n: &AtomicU64, first: &AtomicU64, last: &AtomicU64) {
        let t = reefd::protocol::monotonic_ns();
        if n.fetch_add(1, Relaxed) == 0 {
            first.store(t, Relaxed);
        }
        last.store(t, Relaxed);
    }
}

/// A socket whose calls [`IO`] stamps.
pub struct Stamped(pub tokio::net::TcpStream);

impl AsyncRead for Stamped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.0).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            IO.note(&IO.reads, &IO.first_read, &IO.last_read);
        }
        r
    }
}

impl AsyncWrite for Stamped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.0).poll_write(cx, b);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            IO.note(&IO.writes, &IO.first_write, &IO.last_write);
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.0).poll_write_vectored(cx, b);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            IO.note(&IO.writes, &IO.first_write, &IO.last_write);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

const SOCKET_STEPS: [&str; 8] = [
    "client to its first write",
    "first to last write",
    "last write to daemon's read",
    "answer built to first read",
    "first to last read",
    "last read to decoded answer",
    "writes per request",
    "reads per request",
];

/// The bare connection's round trip split at its socket calls: the
/// client's share on each side of the daemon's stamps (us; then the counts
/// of writes and reads, then the last write to the first read in us).
pub fn socket_split(
    r: &super::steps::pb::ModelInferResponse,
    c0: u64,
    c1: u64,
    io: Calls,
) -> super::steps::Steps {
    let us = |a: u64, b: u64| (b as f64 - a as f64) / 1e3;
    let (read, built) = (
        super::steps::stamp(r, "reef_read_ns"),
        super::steps::stamp(r, "reef_built_ns"),
    );
    vec![
        us(c0, io.first_write),
        us(io.first_write, io.last_write),
        us(io.last_write, read),
        us(built, io.first_read),
        us(io.first_read, io.last_read),
        us(io.last_read, c1),
        io.writes as f64,
        io.reads as f64,
        us(io.last_write, io.first_read),
    ]
}

/// The native round trip at the client's socket calls: its call to the
/// request's last write, that write to the answer's first read, that read
/// to the decoded answer (us).
pub fn native_split(c0: u64, sent: u64, got: u64, c1: u64) -> [f64; 3] {
    let us = |a: u64, b: u64| (b as f64 - a as f64) / 1e3;
    [us(c0, sent), us(sent, got), us(got, c1)]
}

/// Prints [`socket_split`]'s medians and means, and what gRPC adds at the
/// client's socket against `native` ([`native_split`]): from the request's
/// last byte written to the answer's first byte read (the daemon, both
/// ends of the loopback socket and the client's wake-up: what the daemon
/// adds whichever client sends), and in the client around it.
pub fn show_socket(client: &str, native: &[[f64; 3]], rows: &[super::steps::Steps]) {
    use reefd::metrics::summarize;
    println!("  gRPC, {client} client, at its socket calls:");
    for (k, name) in SOCKET_STEPS.iter().enumerate() {
        let s = summarize(rows.iter().map(|r| r[k]));
        println!("  {:<30} {:>9.1} {:>9.1}", name, s.p50_us, s.mean_us);
    }
    let n_wire = summarize(native.iter().map(|r| r[1]));
    let n_client = summarize(native.iter().map(|r| r[0] + r[2]));
    let g_wire = summarize(rows.iter().map(|r| r[8]));
    let g_client = summarize(rows.iter().map(|r| r[0] + r[1] + r[4] + r[5]));
    println!(
        "  last request byte written to first answer byte read: native p50 {:.1} p99 {:.1} us, gRPC ({client}) p50 {:.1} p99 {:.1} us: added p50 {:+.1}, p99 {:+.1} us",
        n_wire.p50_us, n_wire.p99_us, g_wire.p50_us, g_wire.p99_us,
        g_wire.p50_us - n_wire.p50_us, g_wire.p99_us - n_wire.p99_us
    );
    println!(
        "  in the client around it: native p50 {:.1} p99 {:.1} us, gRPC ({client}) p50 {:.1} p99 {:.1} us: added p50 {:+.1}, p99 {:+.1} us",
        n_client.p50_us, n_client.p99_us, g_client.p50_us, g_client.p99_us,
        g_client.p50_us - n_client.p50_us, g_client.p99_us - n_client.p99_us
    );
}

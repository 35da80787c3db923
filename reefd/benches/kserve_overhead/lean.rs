//! A lean gRPC client: one unary `ModelInfer` call on the `h2` crate
//! directly, its connection polled in the caller's own task, the request's
//! HEADERS and its one DATA frame (END_STREAM set) queued before the
//! connection is polled, so that they leave in one write, and the socket
//! read through a buffer that takes an answer in one read ([`Buffered`]).
//!
//! Why: by its socket calls the tonic client (generated client, hyper's
//! HTTP/2 client, tonic's body) writes a request in three writes, from a
//! task of hyper's of its own, and spends 50–60 us at p50 around the
//! daemon (docs/kserve.md, "The calls on their connection's task"). The
//! issue's goal (gRPC adds at most 50 us at p99 over the native socket)
//! is about what the protocol costs; the native socket's client is itself
//! a lean one (a blocking writer and reader, `reefd::client`). This client
//! shows what the gRPC round trip adds when the client is as lean, beside
//! tonic's and tritonclient's own figures, which the bench keeps printing.
//! Framing follows gRPC over HTTP/2 (grpc/grpc, doc/PROTOCOL-HTTP2.md): a
//! POST to `/inference.GRPCInferenceService/ModelInfer` with
//! `content-type: application/grpc` and `te: trailers`, the message
//! behind a 5-byte prefix (compressed flag, big-endian length), and the
//! status in the trailers' `grpc-status` (or in a trailers-only answer's
//! headers).

use prost::Message;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use tonic::codegen::{http, Bytes};

use super::steps::pb;

type Conn = h2::client::Connection<Buffered, Bytes>;

/// The socket read through a 64 KiB buffer: h2's reader asks for at most
/// 8 KiB at a time (tokio-util's `FramedRead` starts its buffer there), so
/// an answer of 8.5 KiB took two reads; here one read takes what the
/// socket holds. Writes go straight through.
pub struct Buffered {
    io: super::direct::Stamped,
    buf: Box<[u8]>,
    at: usize,
    end: usize,
}

impl tokio::io::AsyncRead for Buffered {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        out: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let me = &mut *self;
        if me.at == me.end {
            let mut rb = tokio::io::ReadBuf::new(&mut me.buf);
            std::task::ready!(Pin::new(&mut me.io).poll_read(cx, &mut rb))?;
            (me.at, me.end) = (0, rb.filled().len());
        }
        let n = (me.end - me.at).min(out.remaining());
        out.put_slice(&me.buf[me.at..me.at + n]);
        me.at += n;
        Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for Buffered {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        b: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, b)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        b: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, b)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// One HTTP/2 connection to the daemon's gRPC port and the runtime that
/// drives it; [`Lean::infer`] blocks for one call.
pub struct Lean {
    rt: tokio::runtime::Runtime,
    send: h2::client::SendRequest<Bytes>,
    conn: Pin<Box<Conn>>,
    uri: http::Uri,
}

impl Lean {
    /// Connects to `addr` (host:port) with TCP_NODELAY.
    pub fn connect(addr: &str) -> anyhow::Result<Lean> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (send, conn) = rt.block_on(async {
            let tcp = tokio::net::TcpStream::connect(addr).await?;
            tcp.set_nodelay(true)?;
            let io = Buffered {
                io: super::direct::Stamped(tcp),
                buf: vec![0; 64 * 1024].into_boxed_slice(),
                at: 0,
                end: 0,
            };
            Ok::<_, anyhow::Error>(h2::client::handshake(io).await?)
        })?;
        let uri = format!("http://{addr}/inference.GRPCInferenceService/ModelInfer").parse()?;
        Ok(Lean {
            rt,
            send,
            conn: Box::pin(conn),
            uri,
        })
    }

    /// One `ModelInfer` call; polls the call and then the connection in one
    /// task until the answer has come, so no wake-up crosses tasks.
    pub fn infer(&mut self, req: &pb::ModelInferRequest) -> anyhow::Result<pb::ModelInferResponse> {
        let mut body = Vec::with_capacity(5 + req.encoded_len());
        body.push(0u8);
        body.extend_from_slice(&(req.encoded_len() as u32).to_be_bytes());
        req.encode(&mut body)?;
        let call = call(self.send.clone(), self.uri.clone(), Bytes::from(body));
        let mut call = std::pin::pin!(call);
        let conn = &mut self.conn;
        self.rt.block_on(std::future::poll_fn(|cx| {
            // The call first: it queues its frames, then the connection
            // writes them (and reads the answer); then the call again, for
            // the answer the connection may just have read.
            if let Poll::Ready(r) = call.as_mut().poll(cx) {
                return Poll::Ready(r);
            }
            if let Poll::Ready(r) = conn.as_mut().poll(cx) {
                return Poll::Ready(Err(match r {
                    Ok(()) => anyhow::anyhow!("the daemon closed the gRPC connection"),
                    Err(e) => e.into(),
                }));
            }
            call.as_mut().poll(cx)
        }))
    }
}

async fn call(
    send: h2::client::SendRequest<Bytes>,
    uri: http::Uri,
    body: Bytes,
) -> anyhow::Result<pb::ModelInferResponse> {
    let mut send = send.ready().await?;
    let req = http::Request::post(uri)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())?;
    let (answer, mut stream) = send.send_request(req, false)?;
    stream.send_data(body, true)?;
    let answer = answer.await?;
    anyhow::ensure!(
        answer.status() == http::StatusCode::OK,
        "HTTP status {}",
        answer.status()
    );
    let status = |h: &http::HeaderMap| {
        h.get("grpc-status")
            .map(|v| (v.clone(), h.get("grpc-message").cloned()))
    };
    if let Some((s, m)) = status(answer.headers()) {
        anyhow::bail!("trailers-only answer: grpc-status {s:?} {m:?}");
    }
    let mut body = answer.into_body();
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        body.flow_control().release_capacity(chunk.len())?;
        got.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await?.unwrap_or_default();
    match status(&trailers) {
        Some((s, _)) if s == "0" => {}
        other => anyhow::bail!("grpc-status {other:?}"),
    }
    anyhow::ensure!(
        got.len() >= 5 && got[0] == 0,
        "answer of {} bytes without an uncompressed message prefix",
        got.len()
    );
    let len = u32::from_be_bytes(got[1..5].try_into().unwrap()) as usize;
    anyhow::ensure!(
        got.len() == 5 + len,
        "message prefix says {len} bytes, {} came",
        got.len() - 5
    );
    Ok(pb::ModelInferResponse::decode(&got[5..])?)
}

//! A TCP listener that holds at most N connections open: the next `accept`
//! waits for a permit, and each connection returns its permit when it is
//! dropped. Clients past the limit wait in the kernel's backlog rather than
//! taking descriptors and tasks from the ones being served.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::h2watch::H2Watch;

pub struct Limited {
    inner: TcpListener,
    permits: Arc<Semaphore>,
}

impl Limited {
    pub fn new(inner: TcpListener, max: usize) -> Self {
        Limited {
            inner,
            permits: Arc::new(Semaphore::new(max)),
        }
    }

    /// Accepts the next connection once fewer than the limit are open.
    pub async fn accept_limited(&mut self) -> (Conn, SocketAddr) {
        loop {
            let permit = Arc::clone(&self.permits)
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            match self.inner.accept().await {
                Ok((s, addr)) => {
                    let _ = s.set_nodelay(true);
                    return (
                        Conn {
                            inner: s,
                            _permit: Some(permit),
                            peer: PeerAddr {
                                addr: Some(addr),
                                client_cert: false,
                            },
                            watch: None,
                            last_read: None,
                        },
                        addr,
                    );
                }
                Err(e) => {
                    // Out of descriptors and the like: wait, do not spin.
                    tracing::debug!(error = %e, "accept failed");
                    drop(permit);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }
}

/// The peer of a connection, for [`super::Access`] (HTTP's `ConnectInfo`
/// and gRPC's connect info): its address, and whether it presented a
/// client certificate that the TLS layer verified (`kserve.tls_client_ca`).
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr {
    pub addr: Option<SocketAddr>,
    pub client_cert: bool,
}

/// A connection holding its permit: the TCP stream itself, or (the gRPC
/// front over TLS) the TLS stream over the TCP connection.
pub struct Conn<S = TcpStream> {
    inner: S,
    _permit: Option<OwnedSemaphorePermit>,
    peer: PeerAddr,
    /// The deadlines of the connection's bytes ([`Conn::watch_http2`],
    /// [`Conn::watch_tls_records`]), and the timer armed at the next of
    /// them.
    watch: Option<(H2Watch, Pin<Box<tokio::time::Sleep>>)>,
    /// When a read last returned bytes, in ns of CLOCK_MONOTONIC (where the
    /// fronts' `reef_timeline` begins; [`Conn::last_read`]).
    last_read: Option<Arc<std::sync::atomic::AtomicU64>>,
}

/// The stream a gRPC connection is served over: one type for tonic's
/// incoming connections, plain or TLS.
pub enum Stream {
    Tcp(TcpStream),
    /// The TLS stream over the TCP connection, whose own [`Conn`] watches
    /// the TLS records.
    Tls(Box<tokio_rustls::server::TlsStream<Conn<TcpStream>>>),
}

impl Conn<TcpStream> {
    /// The same connection over `tls` (the permit moves to the outer
    /// connection, the record watch stays on the inner one).
    pub fn over_tls(
        mut tls: tokio_rustls::server::TlsStream<Conn<TcpStream>>,
        client_cert: bool,
    ) -> Conn<Stream> {
        let permit = tls.get_mut().0._permit.take();
        let peer = PeerAddr {
            addr: tls.get_ref().0.peer.addr,
            client_cert,
        };
        Conn {
            inner: Stream::Tls(Box::new(tls)),
            _permit: permit,
            peer,
            watch: None,
            last_read: None,
        }
    }

    /// The plain connection as a gRPC [`Stream`].
    pub fn plain(self) -> Conn<Stream> {
        Conn {
            inner: Stream::Tcp(self.inner),
            _permit: self._permit,
            peer: self.peer,
            watch: self.watch,
            last_read: self.last_read,
        }
    }

    /// TLS records (RFC 8446 §5.1: a 5-byte header with a 16-bit length)
    /// must be whole within `frame_within` of their first byte, as HTTP/2
    /// frames are above them: without this, a client trickling one record
    /// would hold its connection with no frame of it ever seen by the
    /// HTTP/2 watch. A write pending for `write_within` (a client not
    /// reading) closes the connection too.
    pub fn watch_tls_records(mut self, frame_within: Duration, write_within: Duration) -> Self {
        let now = tokio::time::Instant::now();
        let w = H2Watch::tls_records(frame_within, write_within, now.into_std());
        let sleep = Box::pin(tokio::time::sleep_until(now + frame_within));
        self.watch = Some((w, sleep));
        self
    }
}

impl<S> Conn<S> {
    /// A write pending for `write_within` (a client that does not read
    /// its answers) closes the connection; nothing else is watched (the
    /// HTTP/1 front, see [`H2Watch::writes_only`]).
    pub fn watch_writes(mut self, write_within: Duration) -> Self {
        let now = tokio::time::Instant::now();
        let w = H2Watch::writes_only(write_within, now.into_std());
        let sleep = Box::pin(tokio::time::sleep_until(now + write_within));
        self.watch = Some((w, sleep));
        // The HTTP front's `reef_timeline` begins at the last read too.
        self.last_read = Some(Arc::default());
        self
    }

    /// The connection is closed when its client breaks one of the
    /// [`H2Watch`] rules: the preface and every frame whole within
    /// `frame_within` of their first byte, every request within
    /// `request_within` of its first HEADERS frame (the gRPC front: tonic
    /// has no read timeouts of its own).
    /// It is closed `close_after` after it was accepted in any case (none:
    /// `kserve.grpc_max_connection_age_ms = 0`).
    pub fn watch_http2(
        mut self,
        frame_within: Duration,
        request_within: Duration,
        close_after: Option<Duration>,
    ) -> Self {
        let now = tokio::time::Instant::now();
        let mut w = H2Watch::new(frame_within, request_within, now.into_std());
        if let Some(after) = close_after {
            w = w.close_at(now.into_std() + after);
        }
        let sleep = Box::pin(tokio::time::sleep_until(now + frame_within));
        self.watch = Some((w, sleep));
        self.last_read = Some(Arc::default());
        self
    }

    pub fn peer(&self) -> PeerAddr {
        self.peer
    }

    /// When a read of this connection last returned bytes (ns of
    /// CLOCK_MONOTONIC; 0: none yet), for watched connections.
    pub fn last_read(&self) -> Option<Arc<std::sync::atomic::AtomicU64>> {
        self.last_read.clone()
    }

    /// Before a write: the rules that hold while the server writes (h2
    /// reads nothing while a write is pending: a GOAWAY or PONG to a
    /// client that does not read) are the close time and the write that
    /// stays pending too long; the timer is armed so the task wakes for
    /// them.
    fn check_writing(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if let Some((w, _)) = &self.watch {
            if let Some(why) = w.broken_writing(std::time::Instant::now()) {
                tracing::debug!(peer = ?self.peer.addr, %why, "connection closed");
                return Err(io::Error::new(io::ErrorKind::TimedOut, why.to_string()));
            }
        }
        self.arm(cx);
        Ok(())
    }

    /// After a write or flush: a pending one stops the client's clocks
    /// (the server is not reading while it waits), a finished one starts
    /// them again.
    fn after_write<T>(&mut self, r: &Poll<io::Result<T>>, cx: &mut Context<'_>) {
        if let Some((w, _)) = &mut self.watch {
            let now = std::time::Instant::now();
            match r {
                Poll::Pending => w.write_pending(now),
                Poll::Ready(_) => w.write_done(now),
            }
        }
        if r.is_pending() {
            self.arm(cx);
        }
    }

    /// Arms the timer at the watch's next deadline; wakes the task at once
    /// if that has passed.
    fn arm(&mut self, cx: &mut Context<'_>) {
        if let Some((w, sleep)) = &mut self.watch {
            if let Some(at) = w.deadline() {
                sleep.as_mut().reset(at.into());
                if sleep.as_mut().poll(cx).is_ready() {
                    cx.waker().wake_by_ref();
                }
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Conn<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // Read first: bytes already waiting in the socket count as sent,
        // however long the server took to read them.
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Some(at) = &self.last_read {
            if buf.filled().len() > before {
                at.store(
                    crate::protocol::monotonic_ns(),
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
        }
        if let Some((w, _)) = &mut self.watch {
            let now = std::time::Instant::now();
            w.read(&buf.filled()[before..], now);
            if let Some(why) = w.broken(now) {
                tracing::debug!(peer = ?self.peer.addr, %why, "connection closed");
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    why.to_string(),
                )));
            }
        }
        self.arm(cx);
        r
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Conn<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check_writing(cx)?;
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let (Poll::Ready(Ok(n)), Some((w, _))) = (&r, &mut self.watch) {
            w.wrote(&buf[..*n]);
        }
        self.after_write(&r, cx);
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check_writing(cx)?;
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.after_write(&r, cx);
        r
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check_writing(cx)?;
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let (Poll::Ready(Ok(n)), Some((w, _))) = (&r, &mut self.watch) {
            let mut left = *n;
            for b in bufs {
                if left == 0 {
                    break;
                }
                let k = left.min(b.len());
                w.wrote(&b[..k]);
                left -= k;
            }
        }
        self.after_write(&r, cx);
        r
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

macro_rules! both {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Stream::Tcp($s) => {
                let $s = Pin::new($s);
                $e
            }
            Stream::Tls($s) => {
                let $s = Pin::new(&mut **$s);
                $e
            }
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        both!(self, s => s.poll_read(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        both!(self, s => s.poll_write(cx, buf))
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        both!(self, s => s.poll_flush(cx))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        both!(self, s => s.poll_shutdown(cx))
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        both!(self, s => s.poll_write_vectored(cx, bufs))
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }
}

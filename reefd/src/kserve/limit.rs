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
                            _permit: permit,
                            watch: None,
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

impl axum::serve::Listener for Limited {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        self.accept_limited().await
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// The peer of a connection, for [`super::Access`] (HTTP's `ConnectInfo`
/// and gRPC's connect info).
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub Option<SocketAddr>);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, Limited>> for PeerAddr {
    fn connect_info(s: axum::serve::IncomingStream<'_, Limited>) -> Self {
        PeerAddr(Some(*s.remote_addr()))
    }
}

/// A connection holding its permit.
pub struct Conn {
    inner: TcpStream,
    _permit: OwnedSemaphorePermit,
    /// The HTTP/2 deadlines of a gRPC connection ([`Conn::watch_http2`]),
    /// and the timer armed at the next of them.
    watch: Option<(H2Watch, Pin<Box<tokio::time::Sleep>>)>,
}

impl Conn {
    /// The connection is closed when its client breaks one of the
    /// [`H2Watch`] rules: the preface and every frame whole within
    /// `frame_within` of their first byte, every request within
    /// `request_within` of its first HEADERS frame (the gRPC front: tonic
    /// has no read timeouts of its own).
    /// It is closed `close_after` after it was accepted in any case.
    pub fn watch_http2(
        mut self,
        frame_within: Duration,
        request_within: Duration,
        close_after: Duration,
    ) -> Self {
        let now = tokio::time::Instant::now();
        let w = H2Watch::new(frame_within, request_within, now.into_std())
            .close_at(now.into_std() + close_after);
        let sleep = Box::pin(tokio::time::sleep_until(now + frame_within));
        self.watch = Some((w, sleep));
        self
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// While the server writes (h2 reads nothing while a write is pending:
    /// a GOAWAY or PONG to a client that does not read), only the close
    /// time is checked, and the timer armed so the task wakes for it.
    fn check_close(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if let Some((w, _)) = &self.watch {
            if w.past_close(std::time::Instant::now()) {
                tracing::debug!(peer = ?self.inner.peer_addr().ok(), "gRPC connection closed at its age and grace");
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the connection was still open kserve.grpc_max_connection_age_grace_ms after it was asked to go away",
                ));
            }
        }
        self.arm(cx);
        Ok(())
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

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // Read first: bytes already waiting in the socket count as sent,
        // however long the server took to read them.
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Some((w, _)) = &mut self.watch {
            let now = std::time::Instant::now();
            w.read(&buf.filled()[before..], now);
            if let Some(why) = w.broken(now) {
                tracing::debug!(peer = ?self.inner.peer_addr().ok(), %why, "gRPC connection closed");
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

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check_close(cx)?;
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let (Poll::Ready(Ok(n)), Some((w, _))) = (&r, &mut self.watch) {
            w.wrote(&buf[..*n]);
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check_close(cx)?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check_close(cx)?;
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
        r
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

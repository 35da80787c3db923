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
                            opening: None,
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
    /// Bytes still expected before `deadline`, and the deadline
    /// ([`Conn::first_bytes_within`]).
    opening: Option<(usize, Pin<Box<tokio::time::Sleep>>)>,
}

/// The HTTP/2 client connection preface (RFC 9113 §3.4), which a gRPC
/// client sends first: `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`.
pub const HTTP2_PREFACE_BYTES: usize = 24;

impl Conn {
    /// The connection is closed unless its first `bytes` arrive within
    /// `within`: a client that connects and sends nothing, or trickles its
    /// opening, does not hold a connection slot for ever (the gRPC front:
    /// tonic has no handshake timeout of its own).
    pub fn first_bytes_within(mut self, bytes: usize, within: Duration) -> Self {
        self.opening = Some((bytes, Box::pin(tokio::time::sleep(within))));
        self
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some((_, deadline)) = &mut self.opening {
            if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client did not send its connection preface in time",
                )));
            }
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let got = buf.filled().len() - before;
        if let Some((left, _)) = &mut self.opening {
            *left = left.saturating_sub(got);
            if *left == 0 {
                self.opening = None;
            }
        }
        r
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
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
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

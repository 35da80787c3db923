//! The RPC server of reefd (REEF §3.1, Fig. 5: "REEF provides an RPC-based
//! interface for DNN-based applications to submit inference requests"): the
//! Unix socket with its permissions and peer-credential check, one task per
//! connection, the Prometheus metrics endpoint, and graceful shutdown.
//!
//! Shutdown (SIGTERM/SIGINT): stop accepting connections, refuse new work
//! with `shutting_down`, let in-flight inferences finish for the grace
//! period, fail the rest explicitly, flush every answer, remove the socket
//! file.

use crate::protocol::{
    encode, encode_message, parse_frame, split_tensor_frame, Decoded, ErrorCode, Event,
    FrameDecoder, Reply, RequestBody, ServerMessage, TENSOR_FRAME,
};
use crate::runtime::{Conn, Handled, Peer, Runtime};
use anyhow::{bail, Context};
use nix::unistd::{Gid, Uid};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

/// Settings of the server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub socket: PathBuf,
    pub max_frame_bytes: usize,
    /// Largest tensor frame (an `infer` with inline tensors).
    pub max_tensor_frame_bytes: usize,
    pub max_connections: usize,
    pub shutdown_grace: Duration,
    /// The group whose members may connect (besides root and the daemon's
    /// own user).
    pub socket_gid: Option<Gid>,
    pub metrics: Option<SocketAddr>,
}

/// Binds the socket: creates its directory, refuses to steal the socket of
/// a live daemon, removes a stale one, and sets its mode and group.
pub fn bind_socket(
    path: &Path,
    mode: u32,
    group: Option<Gid>,
) -> anyhow::Result<std::os::unix::net::UnixListener> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::create_dir_all(dir).with_context(|| {
                format!(
                    "cannot create the socket directory {} (run as root, or choose --socket in a writable directory)",
                    dir.display()
                )
            })?;
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
        }
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!(
                "another reefd is already serving on {} (stop it with `reefd stop`, or choose another --socket)",
                path.display()
            );
        }
        std::fs::remove_file(path)
            .with_context(|| format!("cannot remove the stale socket {}", path.display()))?;
    }
    let listener = std::os::unix::net::UnixListener::bind(path)
        .with_context(|| format!("cannot bind the socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set mode {mode:o} on {}", path.display()))?;
    if let Some(gid) = group {
        nix::unistd::chown(path, None, Some(gid)).with_context(|| {
            format!(
                "cannot give the socket {} to group {gid} (changing a file's group needs root or membership of that group)",
                path.display()
            )
        })?;
    }
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Looks up a group by name.
pub fn group_gid(name: &str) -> anyhow::Result<Gid> {
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid),
        Ok(None) => bail!(
            "daemon.socket_group = {name:?}: no such group (create it with `groupadd {name}`, or leave the key empty)"
        ),
        Err(e) => bail!("cannot look up group {name:?}: {e}"),
    }
}

/// Who may connect: root, the daemon's own user, and members of the socket's
/// group. The socket's mode already enforces this for the filesystem; the
/// check is repeated on the peer credentials of every connection.
fn authorized(peer: Peer, socket_gid: Option<Gid>) -> bool {
    let me = Uid::effective().as_raw();
    if peer.uid == 0 || peer.uid == me {
        return true;
    }
    let Some(gid) = socket_gid else {
        return false;
    };
    if peer.gid == gid.as_raw() {
        return true;
    }
    // Supplementary groups of the peer's user.
    match nix::unistd::User::from_uid(Uid::from_raw(peer.uid)) {
        Ok(Some(u)) => {
            let Ok(name) = std::ffi::CString::new(u.name) else {
                return false;
            };
            nix::unistd::getgrouplist(&name, u.gid)
                .map(|gs| gs.contains(&gid))
                .unwrap_or(false)
        }
        _ => false,
    }
}

/// Runs the server until `shutdown` resolves, then shuts down gracefully.
pub async fn serve(
    rt: Arc<Runtime>,
    listener: std::os::unix::net::UnixListener,
    opts: ServerOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let listener = UnixListener::from_std(listener)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns: JoinSet<()> = JoinSet::new();
    let next_conn = Arc::new(AtomicU64::new(1));
    let metrics_task = match opts.metrics {
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen for metrics on {addr} (metrics.listen)"))?;
            tracing::info!(%addr, "metrics on http://{addr}/metrics");
            Some(tokio::spawn(metrics_server(l, Arc::clone(&rt))))
        }
        None => None,
    };
    tokio::pin!(shutdown);
    let mut last_accept_warning: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(s) => s,
                    Err(e) => {
                        // Out of descriptors (EMFILE/ENFILE): the waiting
                        // connection stays in the backlog until one closes;
                        // said once a second, not at every retry.
                        let now = Instant::now();
                        if last_accept_warning.is_none_or(|t| now - t > Duration::from_secs(1)) {
                            tracing::warn!(error = %e, "accept failed (descriptor limit: see daemon.max_connections and LimitNOFILE)");
                            last_accept_warning = Some(now);
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let id = next_conn.fetch_add(1, Ordering::Relaxed);
                conns.spawn(connection(Arc::clone(&rt), stream, id, opts.clone(), stop_rx.clone()));
            }
        }
    }
    // Graceful shutdown.
    drop(listener);
    let _ = std::fs::remove_file(&opts.socket);
    rt.begin_shutdown();
    let in_flight = rt.tasks_in_flight();
    tracing::info!(
        in_flight,
        grace_ms = opts.shutdown_grace.as_millis() as u64,
        "shutting down"
    );
    let deadline = Instant::now() + opts.shutdown_grace;
    // Answers still being read (sim:*, the CPU build's values) count too:
    // their clients have not been told.
    while (rt.tasks_in_flight() > 0 || rt.answers_pending() > 0) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let failed = rt.fail_all("reefd is shutting down");
    if failed > 0 {
        tracing::warn!(failed, "in-flight inferences failed at shutdown");
    }
    let _ = stop_tx.send(true);
    let flush = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(2), flush)
        .await
        .is_err()
    {
        tracing::warn!("some connections did not close in time");
        conns.abort_all();
    }
    if let Some(t) = metrics_task {
        t.abort();
    }
    rt.stop();
    tracing::info!("reefd stopped");
    Ok(())
}

async fn connection(
    rt: Arc<Runtime>,
    stream: UnixStream,
    id: u64,
    opts: ServerOptions,
    mut stop: watch::Receiver<bool>,
) {
    let peer = match stream.peer_cred() {
        Ok(c) => Peer {
            uid: c.uid(),
            gid: c.gid(),
            pid: c.pid(),
        },
        Err(e) => {
            tracing::warn!(error = %e, "cannot read peer credentials; connection dropped");
            return;
        }
    };
    let (rd, mut wr) = stream.into_split();
    if !authorized(peer, opts.socket_gid) {
        tracing::warn!(uid = peer.uid, pid = ?peer.pid, "connection refused: not authorized");
        let msg = ServerMessage::Error {
            id: None,
            code: ErrorCode::PermissionDenied,
            message: format!(
                "uid {} may not use reefd: ask an administrator to add you to the socket's group (daemon.socket_group)",
                peer.uid
            ),
        };
        let _ = wr.write_all(&encode(&msg)).await;
        return;
    }
    if !rt.connection_opened(opts.max_connections) {
        let msg = ServerMessage::Error {
            id: None,
            code: ErrorCode::Busy,
            message: format!(
                "reefd serves at most {} connections (daemon.max_connections); retry later",
                opts.max_connections
            ),
        };
        let _ = wr.write_all(&encode(&msg)).await;
        return;
    }
    tracing::debug!(conn = id, uid = peer.uid, pid = ?peer.pid, "connection");
    let (tx, mut rx) = mpsc::unbounded_channel::<ServerMessage>();
    // Requests read but not yet answered on the socket: each request gets
    // exactly one reply or error. Past `MAX_UNANSWERED` the connection is
    // not read until the client takes its answers, so a client that sends
    // and never reads holds a bounded amount of the daemon's memory
    // (issue 25: answers to such a client had queued without bound).
    let unanswered = Arc::new((AtomicUsize::new(0), tokio::sync::Notify::new()));
    let written = Arc::clone(&unanswered);
    let writer = tokio::spawn(async move {
        'write: while let Some(mut msg) = rx.recv().await {
            let answer = !matches!(msg, ServerMessage::Event { .. });
            if let ServerMessage::Reply {
                result: Reply::InferDone(t),
                ..
            }
            | ServerMessage::Event {
                event: Event::TaskDone(t),
            } = &mut msg
            {
                if let Some(tl) = &mut t.timeline {
                    tl.written_ns = crate::protocol::monotonic_ns();
                }
            }
            // An answer with inline outputs: the frame's head, then each
            // output's buffer as the device filled it (not copied into one).
            let (head, data) = encode_message(&msg);
            if wr.write_all(&head).await.is_err() {
                break;
            }
            for d in data {
                if wr.write_all(d).await.is_err() {
                    break 'write;
                }
            }
            if answer {
                written.0.fetch_sub(1, Ordering::AcqRel);
                written.1.notify_one();
            }
        }
    });
    let conn = Conn {
        id,
        peer,
        outbox: tx.clone().into(),
        warm: Arc::new(tokio::sync::Notify::new()),
    };
    let warm = Arc::clone(&conn.warm);
    let mut decoder = FrameDecoder::with_limits(opts.max_frame_bytes, opts.max_tensor_frame_bytes);
    let mut buf = vec![0u8; 64 * 1024];
    // Descriptors the client sent (SCM_RIGHTS), for register_region.
    let mut fds: std::collections::VecDeque<std::os::fd::OwnedFd> = Default::default();
    // Room for the most descriptors one message can carry (SCM_MAX_FD):
    // a truncated control message would leave the received ones open
    // where nothing could close them.
    let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; SCM_MAX_FD]);
    loop {
        let mut stopping = false;
        while unanswered.0.load(Ordering::Acquire) >= MAX_UNANSWERED && !writer.is_finished() {
            tokio::select! {
                _ = unanswered.1.notified() => {}
                _ = stop.changed() => {
                    stopping = true;
                    break;
                }
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
        if stopping {
            break;
        }
        let n = tokio::select! {
            r = read_some(&rd, &mut decoder, &mut buf, &mut cmsg, &mut fds) => match r {
                Ok(Read::Eof) | Err(_) => break,
                Ok(Read::Fill) => 0,
                Ok(Read::Buf(n)) => n,
            },
            _ = stop.changed() => break,
            _ = warm.notified() => {
                peek(&rd);
                continue;
            }
        };
        let arrival = Instant::now();
        decoder.push(&buf[..n]);
        let mut frames = 0usize;
        while let Some(frame) = decoder.next_frame() {
            // One read can hold thousands of small frames (64 KiB of
            // pipelined `hello`s): handled in one go they would hold the
            // thread for milliseconds, which in poll mode also catches the
            // device up and delivers RT completions. Other tasks run
            // between batches.
            frames += 1;
            if frames % FRAMES_PER_TURN == 0 {
                tokio::task::yield_now().await;
            }
            unanswered.0.fetch_add(1, Ordering::AcqRel);
            match frame {
                Decoded::TooLarge { len } => {
                    rt.count_bad_request();
                    let _ = tx.send(ServerMessage::Error {
                        id: None,
                        code: ErrorCode::FrameTooLarge,
                        message: format!(
                            "frame of {len} bytes exceeds the limit of {} bytes (daemon.max_frame_bytes); it was skipped",
                            opts.max_frame_bytes
                        ),
                    });
                }
                Decoded::Frame(payload) => {
                    let tensor_frame = payload.first() == Some(&TENSOR_FRAME);
                    if tensor_frame
                        && split_tensor_frame(&payload)
                            .is_some_and(|(json, _)| json.len() > opts.max_frame_bytes)
                    {
                        rt.count_bad_request();
                        let _ = tx.send(ServerMessage::Error {
                            id: None,
                            code: ErrorCode::FrameTooLarge,
                            message: format!(
                                "the JSON of a tensor frame exceeds the limit of {} bytes (daemon.max_frame_bytes)",
                                opts.max_frame_bytes
                            ),
                        });
                        continue;
                    }
                    match if payload.len() > BIG_FRAME && !tensor_frame {
                        // A large frame is parsed off the thread that serves
                        // the socket (in poll mode it also runs the device and
                        // reads RT requests): 1 MiB of JSON costs it about a
                        // millisecond, which RT requests waited in the socket
                        // (reef-bench hostile: send to first kernel p99 1.1 ms
                        // under near-limit frames, 40 us quiet).
                        tokio::task::spawn_blocking(move || parse_frame(payload))
                            .await
                            .unwrap_or_else(|_| {
                                Err(crate::protocol::BadRequest {
                                    id: None,
                                    message: "the request could not be parsed".into(),
                                })
                            })
                    } else {
                        parse_frame(payload)
                    } {
                        Err(bad) => {
                            rt.count_bad_request();
                            let _ = tx.send(ServerMessage::Error {
                                id: bad.id,
                                code: ErrorCode::BadRequest,
                                message: bad.message,
                            });
                        }
                        Ok((req, frame)) => {
                            let rid = req.id;
                            let handled = if matches!(req.body, RequestBody::RegisterRegion { .. })
                            {
                                rt.register_region(&conn, fds.pop_front())
                            } else if matches!(req.body, RequestBody::LoadModel { .. }) {
                                // Reads model files: off the thread that serves
                                // the socket (and, in poll mode, runs the device).
                                let (rt, conn) = (Arc::clone(&rt), conn.clone());
                                tokio::task::spawn_blocking(move || rt.handle(&conn, rid, req.body, arrival))
                                .await
                                .unwrap_or_else(|_| {
                                    Handled::Error(crate::runtime::Failure::new(
                                        ErrorCode::Internal,
                                        "loading the model failed unexpectedly; see the daemon's log",
                                    ))
                                })
                            } else {
                                rt.handle_data(&conn, rid, req.body, frame, arrival)
                            };
                            match handled {
                                Handled::Reply(r) => {
                                    let _ = tx.send(ServerMessage::Reply { id: rid, result: r });
                                }
                                Handled::Error(f) => {
                                    let _ = tx.send(ServerMessage::Error {
                                        id: Some(rid),
                                        code: f.code,
                                        message: f.message,
                                    });
                                }
                                // Answered by the runtime through the
                                // connection's writer when the task ends.
                                Handled::Sent => {}
                            }
                        }
                    }
                }
            }
        }
    }
    rt.connection_closed(id);
    drop(conn);
    drop(tx);
    let _ = writer.await;
    tracing::debug!(conn = id, "connection closed");
}

/// What [`read_some`] read.
enum Read {
    /// `n` bytes into the read buffer.
    Buf(usize),
    /// Bytes straight into the large frame the decoder is gathering.
    Fill,
    Eof,
}

/// Descriptors a connection may have sent and not yet used (each
/// register_region takes one); more are closed at once.
const MAX_PENDING_FDS: usize = 4;

/// The most descriptors one SCM_RIGHTS message carries (Linux's
/// SCM_MAX_FD).
const SCM_MAX_FD: usize = 253;

/// Reads what the client sent. Into the large frame the decoder is
/// gathering, when there is one (the bytes land where the request will
/// keep them: no second copy); else into `buf`, with the descriptors sent
/// along (SCM_RIGHTS, received close-on-exec) queued in `fds`.
async fn read_some(
    rd: &tokio::net::unix::OwnedReadHalf,
    decoder: &mut FrameDecoder,
    buf: &mut [u8],
    cmsg: &mut Vec<u8>,
    fds: &mut std::collections::VecDeque<std::os::fd::OwnedFd>,
) -> std::io::Result<Read> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let s: &UnixStream = rd.as_ref();
    let fd = s.as_raw_fd();
    loop {
        s.readable().await?;
        let rem = decoder.fill_remaining();
        let r = if rem > 0 {
            s.try_io(tokio::io::Interest::READABLE, || {
                let v = decoder.fill_buf().expect("a frame being gathered");
                v.reserve(rem);
                let spare = v.spare_capacity_mut();
                let want = rem.min(spare.len());
                // SAFETY: recv writes at most `want` bytes into the Vec's
                // spare capacity, which are then committed with set_len.
                let n =
                    unsafe { libc::recv(fd, spare.as_mut_ptr().cast(), want, libc::MSG_DONTWAIT) };
                if n < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // SAFETY: `n` bytes past the length were written by recv.
                unsafe { v.set_len(v.len() + n as usize) };
                Ok(if n == 0 { Read::Eof } else { Read::Fill })
            })
            .inspect(|r| {
                if matches!(r, Read::Fill) {
                    decoder.fill_check();
                }
            })
        } else {
            s.try_io(tokio::io::Interest::READABLE, || {
                use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
                let mut iov = [std::io::IoSliceMut::new(&mut *buf)];
                let msg = recvmsg::<()>(
                    fd,
                    &mut iov,
                    Some(&mut *cmsg),
                    MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
                )
                .map_err(std::io::Error::from)?;
                let n = msg.bytes;
                // Every descriptor received is owned at once (and closed
                // past the first few): the buffer holds SCM_MAX_FD, so
                // the control message is never truncated.
                if let Ok(cmsgs) = msg.cmsgs() {
                    for c in cmsgs {
                        if let ControlMessageOwned::ScmRights(v) = c {
                            for raw in v {
                                // SAFETY: the kernel installed this
                                // descriptor for us just now; it is ours.
                                let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                                if fds.len() < MAX_PENDING_FDS {
                                    fds.push_back(owned);
                                }
                            }
                        }
                    }
                }
                Ok(if n == 0 { Read::Eof } else { Read::Buf(n) })
            })
        };
        match r {
            Ok(r) => return Ok(r),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Frames a connection handles before it lets the thread's other tasks
/// run (the poll loop among them).
const FRAMES_PER_TURN: usize = 32;

/// Frames larger than this are parsed on a blocking thread.
const BIG_FRAME: usize = 64 * 1024;

/// Requests a connection may have unanswered before the daemon stops
/// reading it (an RT client has one; an asynchronous client one per
/// `infer` until its `infer_queued` reply is written).
const MAX_UNANSWERED: usize = 1024;

/// Warms the read path of a connection with a real-time stream: between its
/// requests the thread that serves it simulates the device for
/// milliseconds, and the request then found this task, the socket's kernel
/// structures and the receive path cold (several µs; docs/daemon.md,
/// "Measuring the control path"). The poll loop notifies the task every
/// `WARM_INTERVAL`; it polls like a read and peeks at the socket, which
/// consumes nothing.
fn peek(rd: &tokio::net::unix::OwnedReadHalf) {
    use std::os::fd::AsRawFd;
    let mut b = 0u8;
    let fd = rd.as_ref().as_raw_fd();
    // SAFETY: a one-byte buffer that outlives the call; MSG_PEEK leaves the
    // data in the socket and MSG_DONTWAIT never blocks.
    let _ = unsafe {
        libc::recv(
            fd,
            (&mut b as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
}

/// A minimal HTTP/1.1 endpoint: `GET /metrics` returns the Prometheus text.
async fn metrics_server(listener: tokio::net::TcpListener, rt: Arc<Runtime>) {
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            continue;
        };
        let rt = Arc::clone(&rt);
        tokio::spawn(async move {
            let mut req = Vec::with_capacity(1024);
            let mut buf = [0u8; 1024];
            let read = async {
                while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 8192 {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
            };
            if tokio::time::timeout(Duration::from_secs(5), read)
                .await
                .is_err()
            {
                return;
            }
            let (status, ctype, body) = if req.starts_with(b"GET /metrics ") {
                (
                    "200 OK",
                    "text/plain; version=0.0.4; charset=utf-8",
                    rt.prometheus(),
                )
            } else {
                (
                    "404 Not Found",
                    "text/plain; charset=utf-8",
                    "reefd serves only GET /metrics\n".to_string(),
                )
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(head.as_bytes()).await;
            let _ = s.write_all(body.as_bytes()).await;
        });
    }
}

//! The Rust client API of reefd (REEF §3.1: "REEF provides an RPC-based
//! interface for DNN-based applications to submit inference requests", Fig. 5).
//!
//! A blocking client over the Unix socket, with no async runtime, so any
//! program (reefctl, reef-bench's live mode, an application) can use it.
//! Replies are matched to requests by id; asynchronous completion events that
//! arrive while a reply is awaited are queued and handed out by
//! [`Client::next_event`].
//!
//! ```no_run
//! use reefd::client::Client;
//! use reefd::protocol::Priority;
//! let mut c = Client::connect("/run/reef/reefd.sock")?;
//! c.load_model("vgg", None)?;
//! let s = c.register(Priority::Rt, Some("camera"))?;
//! let r = c.infer(s.stream, "vgg")?;
//! println!("{} us", r.latency_us);
//! # Ok::<(), reefd::client::ClientError>(())
//! ```

use crate::protocol::{
    decode_message, encode, encode_tensor_head, Decoded, ErrorCode, Event, FrameDecoder, HelloInfo,
    ModelInfo, OutputRef, PreemptTarget, Priority, Reply, Request, RequestBody, ServerMessage,
    Stats, StatusInfo, StreamInfo, TaskInfo, TaskResult, TensorRef,
};
mod tensors;
use tensors::send_with_fd;
pub use tensors::{Input, ShmRegion};

use std::collections::VecDeque;
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Largest frame the client accepts from the daemon (answers with inline
/// outputs are tensor frames of up to this size).
const CLIENT_MAX_FRAME: usize = 1 << 31;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to reefd at {path}: {source} (is the daemon running? start it with `reefd start`, or pass --socket)")]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("i/o error talking to reefd: {0}")]
    Io(#[from] std::io::Error),
    #[error("reefd closed the connection")]
    Closed,
    #[error("reefd answered {code}: {message}")]
    Server { code: ErrorCode, message: String },
    #[error("reefd sent a message this client cannot read: {0}")]
    Protocol(String),
    #[error("timed out waiting for reefd")]
    Timeout,
}

impl ClientError {
    /// The daemon's error code, when the daemon refused the request.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Server { code, .. } => Some(*code),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, ClientError>;

/// Writes all of `buf` with `MSG_NOSIGNAL`, so that a daemon that went away
/// is an `EPIPE` error here and never a SIGPIPE that would kill the calling
/// program (reefctl and reef-bench restore SIGPIPE's default disposition so
/// that `reefctl stats --json | head` ends quietly).
fn send_all(sock: &UnixStream, mut buf: &[u8]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    while !buf.is_empty() {
        // SAFETY: the pointer and length describe `buf`, which outlives the
        // call, and the descriptor is owned by `sock` for its duration.
        let n = unsafe {
            libc::send(
                sock.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// Waits until `sock` has data (or end of file) to read, until `deadline`
/// at most; false if the time ran out.
///
/// A thread blocked in `read` on a Unix socket is also woken each time the
/// daemon consumes what it sent (the "write space" wake-up is not filtered
/// for readers), so every request cost the daemon an extra cross-CPU wake-up
/// inside its own `read`, on the RT control path. `poll` for `POLLIN` is
/// woken by incoming data only.
fn wait_readable(sock: &UnixStream, deadline: Option<Instant>) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    loop {
        let ts = match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                Some(libc::timespec {
                    tv_sec: left.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
                    tv_nsec: left.subsec_nanos() as libc::c_long,
                })
            }
            None => None,
        };
        let tsp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        let mut fd = libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, a timespec that outlives the call or
        // null (wait forever), and no signal mask.
        let n = unsafe { libc::ppoll(&mut fd, 1, tsp, std::ptr::null()) };
        if n >= 0 {
            return Ok(n > 0);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// A connection to reefd.
pub struct Client {
    sock: UnixStream,
    decoder: FrameDecoder,
    next_id: u64,
    events: VecDeque<Event>,
    last_send_ns: u64,
    /// When the first read since `last_send_ns` returned bytes.
    first_read_ns: u64,
    /// The socket's send buffer was enlarged for large tensors.
    big_sndbuf: bool,
}

/// Tensor data from which the client enlarges its socket's send buffer.
const BIG_SEND: usize = 4 << 20;

/// Asks for a send buffer of `bytes` (the kernel caps it at
/// net.core.wmem_max); a refusal leaves the default.
pub(crate) fn set_sndbuf(sock: &impl std::os::fd::AsRawFd, bytes: usize) {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    // SAFETY: a valid int option value and its size, on an open socket.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

impl Client {
    pub fn connect(path: impl AsRef<Path>) -> Result<Client> {
        let path = path.as_ref();
        let sock = UnixStream::connect(path).map_err(|source| ClientError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Client {
            sock,
            decoder: FrameDecoder::new(CLIENT_MAX_FRAME),
            next_id: 1,
            events: VecDeque::new(),
            last_send_ns: 0,
            first_read_ns: 0,
            big_sndbuf: false,
        })
    }

    /// The underlying socket (e.g. to shut it down from another thread).
    pub fn socket(&self) -> &UnixStream {
        &self.sock
    }

    /// Sends raw bytes (for tests of the daemon's error handling).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<()> {
        send_all(&self.sock, bytes)?;
        Ok(())
    }

    /// Reads the next message of any kind.
    pub fn read_message(&mut self, timeout: Option<Duration>) -> Result<ServerMessage> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            match self.decoder.next_frame() {
                Some(Decoded::Frame(p)) => return decode_message(p).map_err(ClientError::Protocol),
                Some(Decoded::TooLarge { len }) => {
                    return Err(ClientError::Protocol(format!(
                        "message of {len} bytes exceeds the client's limit"
                    )))
                }
                None => {}
            }
            if !wait_readable(&self.sock, deadline)? {
                return Err(ClientError::Timeout);
            }
            let rem = self.decoder.fill_remaining();
            if rem > 0 {
                // A large answer (inline outputs): read straight into its
                // buffer, all of it (the daemon writes it in one go).
                let v = self.decoder.fill_buf().expect("a frame being gathered");
                match (&self.sock).take(rem as u64).read_to_end(v) {
                    Ok(0) => return Err(ClientError::Closed),
                    Ok(_) => self.decoder.fill_check(),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e.into()),
                }
                continue;
            }
            let mut buf = [0u8; 65536];
            match self.sock.read(&mut buf) {
                Ok(0) => return Err(ClientError::Closed),
                Ok(n) => {
                    if self.first_read_ns <= self.last_send_ns {
                        self.first_read_ns = crate::protocol::monotonic_ns();
                    }
                    self.decoder.push(&buf[..n])
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return Err(ClientError::Timeout)
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// When the last request was in the socket (its write had returned), in
    /// CLOCK_MONOTONIC nanoseconds ([`crate::protocol::monotonic_ns`]).
    pub fn last_send_monotonic_ns(&self) -> u64 {
        self.last_send_ns
    }

    /// When the first read after the last request's send returned bytes,
    /// in CLOCK_MONOTONIC nanoseconds (0 or earlier than
    /// [`Client::last_send_monotonic_ns`]: none yet). With one request at a
    /// time, the moment its answer reached this client.
    pub fn first_read_monotonic_ns(&self) -> u64 {
        self.first_read_ns
    }

    /// Sends a request and returns its id without waiting.
    pub fn send(&mut self, body: RequestBody) -> Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let sent = send_all(&self.sock, &encode(&Request { id, body }));
        self.last_send_ns = crate::protocol::monotonic_ns();
        if let Err(e) = sent {
            // The daemon may have refused the connection and closed it
            // (permission, connection limit): report its reason if it sent one.
            if let Ok(ServerMessage::Error { code, message, .. }) =
                self.read_message(Some(Duration::from_millis(200)))
            {
                return Err(ClientError::Server { code, message });
            }
            return Err(e.into());
        }
        Ok(id)
    }

    /// Sends an `infer` as a tensor frame: its JSON, then `data` (the
    /// inline tensors, in order, each where the caller keeps it: nothing is
    /// copied into one buffer).
    pub fn send_with_data(&mut self, body: RequestBody, data: &[&[u8]]) -> Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let n = data.iter().map(|d| d.len()).sum();
        if n >= BIG_SEND && !self.big_sndbuf {
            // A socket buffer of the default 208 KiB moves a 16 MiB tensor
            // in 80 hand-offs between this process and the daemon; 4 MiB
            // (the usual net.core.wmem_max) in a few.
            set_sndbuf(&self.sock, BIG_SEND);
            self.big_sndbuf = true;
        }
        let head = encode_tensor_head(&Request { id, body }, n);
        let mut sent = send_all(&self.sock, &head);
        for d in data {
            if sent.is_err() {
                break;
            }
            sent = send_all(&self.sock, d);
        }
        self.last_send_ns = crate::protocol::monotonic_ns();
        sent?;
        Ok(id)
    }

    /// Waits for the answer to request `id`, queueing events on the way.
    pub fn wait_reply(&mut self, id: u64) -> Result<Reply> {
        loop {
            match self.read_message(None)? {
                ServerMessage::Reply { id: rid, result } if rid == id => return Ok(result),
                ServerMessage::Error {
                    id: rid,
                    code,
                    message,
                } if rid == Some(id) || rid.is_none() => {
                    return Err(ClientError::Server { code, message })
                }
                ServerMessage::Event { event } => self.events.push_back(event),
                other => {
                    return Err(ClientError::Protocol(format!(
                        "unexpected message while waiting for reply {id}: {other:?}"
                    )))
                }
            }
        }
    }

    /// Sends a request and waits for its reply.
    pub fn call(&mut self, body: RequestBody) -> Result<Reply> {
        let id = self.send(body)?;
        self.wait_reply(id)
    }

    /// The next asynchronous event (a completion of a non-blocking infer).
    pub fn next_event(&mut self, timeout: Option<Duration>) -> Result<Event> {
        if let Some(e) = self.events.pop_front() {
            return Ok(e);
        }
        match self.read_message(timeout)? {
            ServerMessage::Event { event } => Ok(event),
            other => Err(ClientError::Protocol(format!(
                "unexpected message while waiting for an event: {other:?}"
            ))),
        }
    }

    pub fn hello(&mut self) -> Result<HelloInfo> {
        match self.call(RequestBody::Hello)? {
            Reply::Hello(h) => Ok(h),
            r => Err(unexpected(r)),
        }
    }

    pub fn status(&mut self) -> Result<StatusInfo> {
        match self.call(RequestBody::Status)? {
            Reply::Status(s) => Ok(*s),
            r => Err(unexpected(r)),
        }
    }

    /// Loads `name` from the daemon's models directory, or from `path`.
    pub fn load_model(&mut self, name: &str, path: Option<&Path>) -> Result<ModelInfo> {
        self.load_model_on(name, path, None)
    }

    /// Loads a model on a node's device `device_index` (or where the
    /// daemon's placement puts it, when `None`); the answer names the
    /// device.
    pub fn load_model_on(
        &mut self,
        name: &str,
        path: Option<&Path>,
        device_index: Option<usize>,
    ) -> Result<ModelInfo> {
        match self.call(RequestBody::LoadModel {
            name: name.into(),
            path: path.map(Path::to_path_buf),
            idempotence: None,
            device_index,
        })? {
            Reply::ModelLoaded(m) => Ok(m),
            r => Err(unexpected(r)),
        }
    }

    /// CASE/MGB `task_begin` (§III-A, §IV): declares a GPU task's needs;
    /// answers the task id and the chosen device (`None`: the task waits
    /// for memory; see [`Client::task_poll`]).
    pub fn task_begin(
        &mut self,
        memory: u64,
        threads_per_block: u32,
        blocks: u64,
    ) -> Result<(u64, Option<usize>)> {
        match self.call(RequestBody::TaskBegin {
            memory,
            threads_per_block,
            blocks,
        })? {
            Reply::TaskPlaced { task, device } => Ok((task, device)),
            r => Err(unexpected(r)),
        }
    }

    /// The device of a task that waited (`None`: still waiting).
    pub fn task_poll(&mut self, task: u64) -> Result<Option<usize>> {
        match self.call(RequestBody::TaskPoll { task })? {
            Reply::TaskPlaced { device, .. } => Ok(device),
            r => Err(unexpected(r)),
        }
    }

    /// CASE/MGB `task_end`: releases what `task_begin` reserved.
    pub fn task_end(&mut self, task: u64) -> Result<()> {
        match self.call(RequestBody::TaskEnd { task })? {
            Reply::TaskEnded { .. } => Ok(()),
            r => Err(unexpected(r)),
        }
    }

    pub fn unload_model(&mut self, name: &str) -> Result<()> {
        match self.call(RequestBody::UnloadModel { name: name.into() })? {
            Reply::ModelUnloaded { .. } => Ok(()),
            r => Err(unexpected(r)),
        }
    }

    pub fn models(&mut self) -> Result<Vec<ModelInfo>> {
        match self.call(RequestBody::ListModels)? {
            Reply::Models { models } => Ok(models),
            r => Err(unexpected(r)),
        }
    }

    /// Registers as an RT or BE client; the stream is this connection's.
    pub fn register(&mut self, priority: Priority, label: Option<&str>) -> Result<StreamInfo> {
        match self.call(RequestBody::Register {
            priority,
            label: label.map(str::to_owned),
        })? {
            Reply::Registered(s) => Ok(s),
            r => Err(unexpected(r)),
        }
    }

    pub fn unregister(&mut self, stream: u64) -> Result<u64> {
        match self.call(RequestBody::Unregister { stream })? {
            Reply::Unregistered {
                cancelled_tasks, ..
            } => Ok(cancelled_tasks),
            r => Err(unexpected(r)),
        }
    }

    /// Blocking inference.
    pub fn infer(&mut self, stream: u64, model: &str) -> Result<TaskResult> {
        self.infer_qos(stream, model, None)
    }

    /// Blocking inference of a latency-critical query with a QoS target,
    /// ms (policies `aker`, `baymax`, `tacker`).
    pub fn infer_qos(
        &mut self,
        stream: u64,
        model: &str,
        qos_ms: Option<f64>,
    ) -> Result<TaskResult> {
        match self.call(RequestBody::Infer {
            stream,
            model: model.into(),
            wait: true,
            qos_ms,
            inputs: None,
            outputs: Vec::new(),
        })? {
            Reply::InferDone(t) => Ok(t),
            r => Err(unexpected(r)),
        }
    }

    /// Blocking inference with tensors: `inputs` inline (their bytes in
    /// the request's frame) or in registered regions; outputs named in
    /// `outputs` are written to their regions, the others come back inline
    /// ([`TaskResult::output_bytes`]).
    pub fn infer_tensors(
        &mut self,
        stream: u64,
        model: &str,
        inputs: &[Input<'_>],
        outputs: &[OutputRef],
    ) -> Result<TaskResult> {
        let id = self.send_tensors(stream, model, inputs, outputs, true)?;
        match self.wait_reply(id)? {
            Reply::InferDone(t) => Ok(t),
            r => Err(unexpected(r)),
        }
    }

    /// As [`Client::infer_tensors`], not waiting: returns the task id; an
    /// [`Event::TaskDone`] with the outputs (or [`Event::TaskFailed`])
    /// follows through [`Client::next_event`].
    pub fn infer_tensors_async(
        &mut self,
        stream: u64,
        model: &str,
        inputs: &[Input<'_>],
        outputs: &[OutputRef],
    ) -> Result<u64> {
        let id = self.send_tensors(stream, model, inputs, outputs, false)?;
        match self.wait_reply(id)? {
            Reply::InferQueued { task } => Ok(task),
            r => Err(unexpected(r)),
        }
    }

    /// Sends an `infer` with tensors; returns the request id.
    fn send_tensors(
        &mut self,
        stream: u64,
        model: &str,
        inputs: &[Input<'_>],
        outputs: &[OutputRef],
        wait: bool,
    ) -> Result<u64> {
        let mut refs = Vec::with_capacity(inputs.len());
        let mut data: Vec<&[u8]> = Vec::new();
        let mut offset = 0u64;
        for i in inputs {
            refs.push(match i {
                Input::Inline {
                    name,
                    dtype,
                    shape,
                    data: d,
                } => {
                    let r = TensorRef {
                        name: name.to_string(),
                        dtype: dtype.to_string(),
                        shape: shape.to_vec(),
                        region: None,
                        offset,
                        bytes: d.len() as u64,
                    };
                    offset += d.len() as u64;
                    data.push(d);
                    r
                }
                Input::Shm {
                    name,
                    dtype,
                    shape,
                    region,
                    offset,
                    bytes,
                } => TensorRef {
                    name: name.to_string(),
                    dtype: dtype.to_string(),
                    shape: shape.to_vec(),
                    region: Some(*region),
                    offset: *offset,
                    bytes: *bytes,
                },
            });
        }
        let body = RequestBody::Infer {
            stream,
            model: model.into(),
            wait,
            qos_ms: None,
            inputs: Some(refs),
            outputs: outputs.to_vec(),
        };
        if data.is_empty() {
            self.send(body)
        } else {
            self.send_with_data(body, &data)
        }
    }

    /// Registers a shared-memory region (its memfd goes with the request,
    /// SCM_RIGHTS); returns the daemon's id of it.
    pub fn register_region(&mut self, region: &ShmRegion) -> Result<u64> {
        self.register_raw_fd(region.fd())
    }

    /// Registers descriptor `fd` as a region (it must be a memfd sealed
    /// against shrinking; [`ShmRegion`] makes one).
    pub fn register_raw_fd(&mut self, fd: std::os::fd::RawFd) -> Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let frame = encode(&Request {
            id,
            body: RequestBody::RegisterRegion { label: None },
        });
        send_with_fd(&self.sock, &frame, fd)?;
        match self.wait_reply(id)? {
            Reply::RegionRegistered { region, .. } => Ok(region),
            r => Err(unexpected(r)),
        }
    }

    pub fn unregister_region(&mut self, region: u64) -> Result<()> {
        match self.call(RequestBody::UnregisterRegion { region })? {
            Reply::RegionUnregistered { .. } => Ok(()),
            r => Err(unexpected(r)),
        }
    }

    /// Asynchronous inference: returns the task id; a [`Event::TaskDone`]
    /// (or [`Event::TaskFailed`]) follows through [`Client::next_event`].
    pub fn infer_async(&mut self, stream: u64, model: &str) -> Result<u64> {
        match self.call(RequestBody::Infer {
            stream,
            model: model.into(),
            wait: false,
            qos_ms: None,
            inputs: None,
            outputs: Vec::new(),
        })? {
            Reply::InferQueued { task } => Ok(task),
            r => Err(unexpected(r)),
        }
    }

    pub fn streams(&mut self) -> Result<Vec<StreamInfo>> {
        match self.call(RequestBody::ListStreams)? {
            Reply::Streams { streams } => Ok(streams),
            r => Err(unexpected(r)),
        }
    }

    pub fn tasks(&mut self) -> Result<Vec<TaskInfo>> {
        match self.call(RequestBody::ListTasks)? {
            Reply::Tasks { tasks } => Ok(tasks),
            r => Err(unexpected(r)),
        }
    }

    pub fn stats(&mut self) -> Result<Stats> {
        match self.call(RequestBody::Stats)? {
            Reply::Stats(s) => Ok(*s),
            r => Err(unexpected(r)),
        }
    }

    /// Preempts one stream or all; returns the preempted stream ids and the
    /// number of kernels evicted or killed.
    pub fn preempt(&mut self, target: PreemptTarget) -> Result<(Vec<u64>, u64)> {
        match self.call(RequestBody::Preempt { target })? {
            Reply::Preempted {
                streams,
                preempted_kernels,
            } => Ok((streams, preempted_kernels)),
            r => Err(unexpected(r)),
        }
    }

    /// Resumes streams preempted by [`Client::preempt`].
    pub fn resume(&mut self, target: PreemptTarget) -> Result<Vec<u64>> {
        match self.call(RequestBody::Resume { target })? {
            Reply::Resumed { streams } => Ok(streams),
            r => Err(unexpected(r)),
        }
    }

    pub fn set_policy(&mut self, policy: &str) -> Result<String> {
        match self.call(RequestBody::SetPolicy {
            policy: policy.into(),
        })? {
            Reply::PolicySet { policy } => Ok(policy),
            r => Err(unexpected(r)),
        }
    }
}

fn unexpected(r: Reply) -> ClientError {
    ClientError::Protocol(format!("unexpected reply {r:?}"))
}

/// The lazy runtime's scheduler side over a daemon connection (CASE/MGB
/// §III-A-2, Fig. 2): `task_begin` asks reefd, and while the task waits
/// for memory polls every millisecond until the daemon names a device.
impl crate::lazy::Placement for Client {
    fn task_begin(&mut self, needs: crate::lazy::Needs) -> std::result::Result<(u64, u32), String> {
        let (task, mut device) =
            Client::task_begin(self, needs.memory, needs.threads_per_block, needs.blocks)
                .map_err(|e| e.to_string())?;
        while device.is_none() {
            std::thread::sleep(std::time::Duration::from_millis(1));
            device = self.task_poll(task).map_err(|e| e.to_string())?;
        }
        Ok((task, device.unwrap_or(0) as u32))
    }

    fn task_end(&mut self, task: u64) -> std::result::Result<(), String> {
        Client::task_end(self, task).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{encode, ErrorCode};
    use std::io::Write;
    use std::os::unix::net::UnixListener;

    /// A client connected to a listener this test plays the daemon on.
    fn pair() -> (Client, UnixStream, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let l = UnixListener::bind(&path).unwrap();
        let c = Client::connect(&path).unwrap();
        let (daemon, _) = l.accept().unwrap();
        (c, daemon, dir)
    }

    #[test]
    fn read_message_waits_for_data_until_its_timeout() {
        let (mut c, mut daemon, _dir) = pair();
        let t = Instant::now();
        assert!(matches!(
            c.read_message(Some(Duration::from_millis(50))),
            Err(ClientError::Timeout)
        ));
        assert!(t.elapsed() >= Duration::from_millis(50));
        let msg = ServerMessage::Error {
            id: Some(7),
            code: ErrorCode::Busy,
            message: "x".into(),
        };
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            daemon.write_all(&encode(&msg)).unwrap();
            daemon
        });
        match c.read_message(Some(Duration::from_secs(5))).unwrap() {
            ServerMessage::Error { id, code, .. } => {
                assert_eq!((id, code), (Some(7), ErrorCode::Busy))
            }
            other => panic!("{other:?}"),
        }
        drop(writer.join().unwrap());
        assert!(matches!(c.read_message(None), Err(ClientError::Closed)));
    }
}

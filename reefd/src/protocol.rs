//! The client protocol of reefd: REEF's RPC-based serving interface (REEF §3.1,
//! "DNN inference serving (online)", Fig. 5: applications submit inference
//! requests to the daemon, which owns the task queues and GPU streams).
//!
//! Wire format (documented for other languages in docs/protocol.md): every
//! message in either direction is one *frame*, a 4-byte big-endian payload
//! length followed by that many bytes of UTF-8 JSON. Requests carry a client
//! chosen `id`; the daemon answers each with exactly one `reply` or `error`
//! carrying the same id, and may interleave `event` messages (asynchronous
//! completions). A frame longer than the daemon's limit is skipped and
//! answered with a `frame_too_large` error; a frame that is not a valid request
//! gets `bad_request`; in both cases the connection stays usable.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Protocol version, reported by `hello`; bumped on incompatible changes.
pub const PROTOCOL_VERSION: u32 = 1;
/// Default largest accepted frame payload, in bytes.
pub const DEFAULT_MAX_FRAME: usize = 1 << 20;
/// Bytes of the length prefix.
pub const HEADER_LEN: usize = 4;

/// A stream's priority level, 0 (highest) to 9 (FIKIT §3.2, Fig. 7: queues
/// Q0–Q9). `rt` and `be` are aliases of 0 and 9 (REEF §3.1: real-time and
/// best-effort); REEF's policies serve level 0 as real-time and every other
/// level as best-effort, FIKIT uses all ten. On the wire 0 and 9 are the
/// strings `"rt"` and `"be"` (as before levels existed), the others numbers;
/// both forms are accepted for every level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Priority(u8);

#[allow(non_upper_case_globals)]
impl Priority {
    /// Real-time: level 0.
    pub const Rt: Priority = Priority(0);
    /// Best-effort: level 9.
    pub const Be: Priority = Priority(9);

    /// Level `n`, if it is 0..=9.
    pub fn level(n: u8) -> Option<Self> {
        (n <= 9).then_some(Priority(n))
    }
    pub fn get(self) -> u8 {
        self.0
    }
    /// Level 0: what REEF's policies serve as real-time.
    pub fn is_rt(self) -> bool {
        self.0 == 0
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            0 => f.write_str("rt"),
            9 => f.write_str("be"),
            n => write!(f, "{n}"),
        }
    }
}

impl std::str::FromStr for Priority {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "rt" | "RT" => Ok(Priority::Rt),
            "be" | "BE" => Ok(Priority::Be),
            other => other
                .parse::<u8>()
                .ok()
                .and_then(Priority::level)
                .ok_or_else(|| format!("priority must be rt, be or a level 0-9, not {other:?}")),
        }
    }
}

impl Serialize for Priority {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            0 | 9 => s.serialize_str(&self.to_string()),
            n => s.serialize_u8(n),
        }
    }
}

impl<'de> Deserialize<'de> for Priority {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => u8::try_from(n)
                .ok()
                .and_then(Priority::level)
                .ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "priority must be rt, be or a level 0-9, not {n}"
                    ))
                }),
            Raw::S(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// One request frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Chosen by the client; echoed in the answer.
    pub id: u64,
    #[serde(flatten)]
    pub body: RequestBody,
}

/// Which streams `preempt` targets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PreemptTarget {
    /// One stream, by id.
    Stream(u64),
    /// Every best-effort stream the caller may preempt.
    All,
}

/// The operations (`"op"` field).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum RequestBody {
    /// Versions and the caller's credentials as the daemon sees them.
    Hello,
    /// Daemon status: device, policy, counts.
    Status,
    /// Load a model by name from the daemon's models directory, or from
    /// `path` (a model directory or schedule file). Idempotent for the owner.
    LoadModel {
        name: String,
        #[serde(default)]
        path: Option<PathBuf>,
        /// Idempotence metadata (`reef-check-idem -o`); default: the file
        /// `<name>.idem.json` beside the schedule, when present.
        #[serde(default)]
        idempotence: Option<PathBuf>,
        /// On a node of several devices: load on this device (0-based)
        /// instead of where placement (MGB Alg. 3) puts it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        device_index: Option<usize>,
    },
    /// Unload a model (its owner or root); refused while tasks use it.
    UnloadModel {
        name: String,
    },
    ListModels,
    /// Register this connection as an RT or BE client and get its stream.
    /// The stream lives until `unregister` or until the connection closes.
    Register {
        priority: Priority,
        #[serde(default)]
        label: Option<String>,
    },
    Unregister {
        stream: u64,
    },
    /// Run one inference of `model` on `stream`. With `wait` (the default)
    /// the reply comes when it completes; without, the reply carries the
    /// task id at once and a `task_done` event follows.
    Infer {
        stream: u64,
        model: String,
        #[serde(default = "default_true")]
        wait: bool,
        /// QoS target of this latency-critical query, ms (policies `aker`,
        /// `baymax`, `tacker`; absent: the policy's default, 3 x the
        /// model's predicted stand-alone latency; ignored by the others).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        qos_ms: Option<f64>,
    },
    ListStreams,
    ListTasks,
    Stats,
    /// Preempt a stream's running work (its owner or root), or all BE
    /// streams (root, or the streams the caller owns).
    Preempt {
        target: PreemptTarget,
    },
    /// Resume streams preempted by `preempt` (same permissions).
    Resume {
        target: PreemptTarget,
    },
    /// Switch the scheduling policy (root or the daemon's own user).
    SetPolicy {
        policy: String,
    },
    /// CASE/MGB's probe (§III-A, §IV): a GPU task's needs before its first
    /// kernel; the answer names the device placement chose (node daemons
    /// only), or says the task waits for memory (then `task_poll`).
    TaskBegin {
        memory: u64,
        threads_per_block: u32,
        blocks: u64,
    },
    /// Where a task that waited was placed.
    TaskPoll {
        task: u64,
    },
    /// The task's last GPU operation is done: release what task_begin
    /// reserved.
    TaskEnd {
        task: u64,
    },
}

fn default_true() -> bool {
    true
}

/// One message from the daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    Reply {
        id: u64,
        result: Reply,
    },
    Error {
        /// The request's id, or null when the request could not be read.
        id: Option<u64>,
        code: ErrorCode,
        message: String,
    },
    Event {
        event: Event,
    },
}

/// Error classes; `message` says what is wrong and what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The frame exceeded the daemon's size limit; it was skipped.
    FrameTooLarge,
    /// The frame was not a valid request (bad JSON, unknown op, bad field).
    BadRequest,
    NotFound,
    PermissionDenied,
    /// The object is in use (e.g. unloading a model with tasks in flight).
    Busy,
    /// The device or engine cannot do this.
    Unsupported,
    /// The daemon is shutting down; the request was not (fully) executed.
    ShuttingDown,
    /// The task was cancelled (its stream was unregistered).
    Cancelled,
    Internal,
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        f.write_str(&s)
    }
}

/// Successful answers, one variant per operation (`"kind"` field).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reply {
    Hello(HelloInfo),
    Status(Box<StatusInfo>),
    ModelLoaded(ModelInfo),
    ModelUnloaded {
        name: String,
    },
    Models {
        models: Vec<ModelInfo>,
    },
    Registered(StreamInfo),
    Unregistered {
        stream: u64,
        cancelled_tasks: u64,
    },
    /// A blocking `infer` finished.
    InferDone(TaskResult),
    /// A non-blocking `infer` was queued; a `task_done` event follows.
    InferQueued {
        task: u64,
    },
    Streams {
        streams: Vec<StreamInfo>,
    },
    Tasks {
        tasks: Vec<TaskInfo>,
    },
    Stats(Box<Stats>),
    Preempted {
        streams: Vec<u64>,
        preempted_kernels: u64,
    },
    Resumed {
        streams: Vec<u64>,
    },
    PolicySet {
        policy: String,
    },
    /// Answer to `task_begin` and `task_poll`: `device` is the chosen
    /// device, `None` while the task waits for memory.
    TaskPlaced {
        task: u64,
        device: Option<usize>,
    },
    TaskEnded {
        task: u64,
    },
}

/// One device of a node daemon (`status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceStatus {
    pub index: usize,
    pub preset: String,
    pub memory_total: u64,
    /// Memory reserved by the models loaded here and the tasks placed here
    /// (their declared needs).
    pub memory_used: u64,
    pub models: Vec<String>,
    pub rt_streams: u32,
    pub be_streams: u32,
    /// Inferences in flight here.
    pub tasks: u32,
    /// Tasks placed here by task_begin and not yet ended.
    pub declared_tasks: u32,
    pub policy: String,
}

/// Placement decisions of a node daemon (`stats`, metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementStats {
    pub models_placed: u64,
    pub models_refused: u64,
    pub streams_bound: u64,
    pub tasks_placed: u64,
    pub tasks_waited: u64,
    pub tasks_refused: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HelloInfo {
    pub daemon_version: String,
    pub protocol: u32,
    pub peer_uid: u32,
    pub peer_gid: u32,
    pub peer_pid: Option<i32>,
    pub max_frame_bytes: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusInfo {
    pub daemon_version: String,
    pub pid: u32,
    /// The device the daemon serves on, e.g. `sim:mi50`.
    pub device: String,
    /// What actually executes kernels (engine name), e.g. which scheduler.
    pub engine: String,
    pub policy: String,
    /// Preemption levels the device backend offers (DESIGN.md: 1 evict
    /// queued, 2 lazy eviction via preempt flag, 3 kill running blocks).
    pub preemption_levels: Vec<u8>,
    /// Why a level is missing, as the backend probed it (e.g. the CUDA
    /// launch path's "no kill (level 3): ..."); empty when none is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preemption_notes: Vec<String>,
    pub uptime_s: f64,
    pub models: usize,
    pub streams: usize,
    pub tasks_in_flight: usize,
    pub connections: usize,
    /// Tasks in FIKIT's measuring stage (policy `fikit*`; fikit.txt §3.2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measuring: Vec<MeasuringTask>,
    /// A node daemon's devices (empty on one device).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceStatus>,
}

/// A task (model) in FIKIT's measuring stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct MeasuringTask {
    pub task: String,
    pub runs_done: u32,
    pub runs: u32,
}

/// The Aker managers' figures (policies `aker`, `baymax`, `tacker`; Aker
/// §8.3): kernels launched alone, fused launches and the BE blocks they
/// carried, BE launches within an LC query's headroom or while no query
/// was active, launches of split remainders, and RT queries within /
/// beyond their QoS target (counted since the daemon started).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct AkerStats {
    pub lc_launches: u64,
    pub fused_launches: u64,
    pub be_blocks_fused: u64,
    pub be_direct_in_headroom: u64,
    pub be_launches_idle: u64,
    pub rest_launches: u64,
    pub qos_met: u64,
    pub qos_missed: u64,
}

/// FIKIT's figures (fikit.txt §3.2): gaps seen and filled, fill kernels,
/// early stops, fill overruns (a fill still on the device when the
/// high-priority task launched), the measuring stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct FikitStats {
    pub gaps_seen: u64,
    pub gaps_below_epsilon: u64,
    pub gaps_filled: u64,
    pub fill_kernels: u64,
    pub early_stops: u64,
    pub overruns: u64,
    pub overrun_us: f64,
    pub measured_runs: u64,
    pub profiles_built: u64,
    pub profiles_missing_or_stale: u64,
    pub measuring: Vec<MeasuringTask>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    pub name: String,
    pub path: PathBuf,
    pub kernels: usize,
    pub buffers: usize,
    /// Stand-alone latency of one inference: measured on the daemon's GPU
    /// when the model was loaded (the fastest of its reference runs), else
    /// the model's profile, when it has one.
    pub standalone_us: Option<f64>,
    /// Whether idempotence metadata was found and loaded with the model.
    pub idempotence: Option<PathBuf>,
    pub owner_uid: u32,
    /// The device holding the model (node daemons only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamInfo {
    pub stream: u64,
    pub priority: Priority,
    pub owner_uid: u32,
    pub owner_pid: Option<i32>,
    pub label: Option<String>,
    /// Tasks submitted and not yet finished.
    pub tasks_in_flight: usize,
    /// Kernels buffered in the stream's host queue / device queue.
    pub host_queue: usize,
    pub device_queue: usize,
    pub completed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Queued,
    Running,
    Preempted,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskInfo {
    pub task: u64,
    pub stream: u64,
    pub model: String,
    pub priority: Priority,
    pub state: TaskState,
    pub age_us: f64,
    /// Index of the next kernel to launch.
    pub next_kernel: usize,
    pub kernels: usize,
}

/// CLOCK_MONOTONIC in nanoseconds: the clock [`TaskResult`]'s
/// `first_kernel_monotonic_ns` and [`crate::client::Client::last_send_monotonic_ns`]
/// are read from, the same for every process on the machine.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_MONOTONIC
    // is always available on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The outcome of one inference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    pub task: u64,
    pub stream: u64,
    pub model: String,
    /// From the request's arrival at the socket to completion.
    pub latency_us: f64,
    /// Latency divided by the model's stand-alone latency (REEF §6.2).
    pub normalized_latency: Option<f64>,
    /// From arrival at the socket to the task's first kernel entering the
    /// device queue: the live control path.
    pub control_path_us: Option<f64>,
    /// The instant the first kernel entered the device queue, in
    /// nanoseconds of CLOCK_MONOTONIC ([`monotonic_ns`]): a client on the
    /// same machine measures the control path from its own send with it,
    /// which also counts the time the request waited in the socket before
    /// the daemon read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_kernel_monotonic_ns: Option<u64>,
    /// How many times the task was preempted (and restored).
    pub preemptions: u32,
    /// Value tracking (DESIGN.md, simulator): whether the final outputs
    /// equal those of an unpreempted run, i.e. every restore was correct.
    /// Absent when the engine does not track values.
    pub outputs_verified: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A non-blocking inference finished.
    TaskDone(TaskResult),
    /// A non-blocking inference failed (cancelled, shutdown).
    TaskFailed {
        task: u64,
        code: ErrorCode,
        message: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Stats {
    pub uptime_s: f64,
    pub requests: u64,
    pub bad_requests: u64,
    pub tasks_submitted: u64,
    pub tasks_completed: u64,
    pub tasks_failed: u64,
    pub kernels_launched: u64,
    /// Tasks restored after a preemption (REEF §4.4).
    pub restores: u64,
    /// Outputs that differed from an unpreempted run (value tracking).
    pub corrupted_outputs: u64,
    /// Scheduler actions the device refused or failed (preempt-flag
    /// writes, kills, queue clears, launches, completion queries); each is
    /// also logged at `error` with the action.
    #[serde(default)]
    pub device_errors: u64,
    /// Preemptions by level ("1", "2", "3").
    pub preemptions: std::collections::BTreeMap<String, u64>,
    pub rt_latency: LatencySummary,
    pub rt_normalized_mean: Option<f64>,
    pub be_latency: LatencySummary,
    /// RT requests only: arrival at the socket to the first kernel issued.
    pub control_path: LatencySummary,
    /// RT kernels launched padded with BE blocks (REEF §5; 0 unless the
    /// policy is `reef` or `reef-dkp-mv`).
    #[serde(default)]
    pub padded_launches: u64,
    /// BE blocks run inside padded launches.
    #[serde(default)]
    pub be_blocks_padded: u64,
    /// FIKIT's figures (policy `fikit*`; absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fikit: Option<FikitStats>,
    /// The Aker managers' figures (policies `aker`, `baymax`, `tacker`;
    /// absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aker: Option<AkerStats>,
    /// Placement decisions (node daemons only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementStats>,
}

/// Encodes one message as a frame (length prefix + JSON).
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    // Serialising these types cannot fail: no maps with non-string keys.
    let body = serde_json::to_vec(msg).unwrap_or_else(|e| {
        format!(r#"{{"type":"error","id":null,"code":"internal","message":"encode: {e}"}}"#)
            .into_bytes()
    });
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// What the decoder produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A whole frame payload.
    Frame(Vec<u8>),
    /// A frame announced `len` bytes, over the limit; its payload is being
    /// skipped and the stream resynchronises after it.
    TooLarge { len: usize },
}

/// Incremental frame decoder: push bytes as they arrive, pull frames.
#[derive(Debug)]
pub struct FrameDecoder {
    max: usize,
    buf: Vec<u8>,
    /// Bytes of an oversized payload still to discard.
    skip: usize,
}

impl FrameDecoder {
    pub fn new(max_frame: usize) -> Self {
        FrameDecoder {
            max: max_frame,
            buf: Vec::new(),
            skip: 0,
        }
    }

    pub fn push(&mut self, mut data: &[u8]) {
        if self.skip > 0 {
            let n = self.skip.min(data.len());
            self.skip -= n;
            data = &data[n..];
        }
        self.buf.extend_from_slice(data);
    }

    /// Bytes buffered but not yet returned.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next complete frame, if any.
    pub fn next_frame(&mut self) -> Option<Decoded> {
        if self.skip > 0 || self.buf.len() < HEADER_LEN {
            return None;
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len > self.max {
            let avail = self.buf.len() - HEADER_LEN;
            let drop_now = avail.min(len);
            self.buf.drain(..HEADER_LEN + drop_now);
            self.skip = len - drop_now;
            return Some(Decoded::TooLarge { len });
        }
        if self.buf.len() < HEADER_LEN + len {
            return None;
        }
        let payload = self.buf[HEADER_LEN..HEADER_LEN + len].to_vec();
        self.buf.drain(..HEADER_LEN + len);
        Some(Decoded::Frame(payload))
    }
}

/// The wire form of an `infer` request, read without buffering (see
/// [`parse_request`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FastInfer<'a> {
    id: u64,
    op: &'a str,
    stream: u64,
    model: String,
    #[serde(default = "default_true")]
    wait: bool,
    #[serde(default)]
    qos_ms: Option<f64>,
}

/// A request that could not be parsed: the id when it could be recovered,
/// and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRequest {
    pub id: Option<u64>,
    pub message: String,
}

/// Parses a request payload. On failure the error names the problem and,
/// when the payload was a JSON object with a numeric `id`, that id.
pub fn parse_request(payload: &[u8]) -> Result<Request, BadRequest> {
    // The RT control path starts here: an `infer` request is read into a
    // plain struct first. The general form (`id` flattened beside an
    // internally tagged body) makes serde buffer the object twice, which on
    // a cold cache costs microseconds. Anything the fast form does not take
    // exactly (another op, an unknown or duplicate field, a bad value) goes
    // through the general parser, so errors and semantics are the same.
    if let Ok(f) = serde_json::from_slice::<FastInfer>(payload) {
        if f.op == "infer" {
            return Ok(Request {
                id: f.id,
                body: RequestBody::Infer {
                    stream: f.stream,
                    model: f.model,
                    wait: f.wait,
                    qos_ms: f.qos_ms,
                },
            });
        }
    }
    match serde_json::from_slice::<Request>(payload) {
        Ok(r) => Ok(r),
        Err(e) => {
            let value: Option<serde_json::Value> = serde_json::from_slice(payload).ok();
            let id = value
                .as_ref()
                .and_then(|v| v.get("id"))
                .and_then(|v| v.as_u64());
            let message = match &value {
                None => format!(
                    "the frame is not valid JSON ({e}); send a 4-byte big-endian length then a JSON object, see docs/protocol.md"
                ),
                Some(v) if !v.is_object() => {
                    "the request must be a JSON object with \"id\" and \"op\"".to_string()
                }
                Some(_) => format!("invalid request: {e} (see docs/protocol.md for the ops and their fields)"),
            };
            Err(BadRequest { id, message })
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn priorities_are_levels_0_to_9_with_rt_and_be_as_aliases() {
        assert_eq!("rt".parse::<Priority>(), Ok(Priority::Rt));
        assert_eq!("be".parse::<Priority>(), Ok(Priority::Be));
        assert_eq!("0".parse::<Priority>(), Ok(Priority::Rt));
        assert_eq!("9".parse::<Priority>(), Ok(Priority::Be));
        assert_eq!("5".parse::<Priority>().map(Priority::get), Ok(5));
        for bad in ["10", "-1", "high", ""] {
            let e = bad.parse::<Priority>().unwrap_err();
            assert!(e.contains("0-9"), "{e}");
        }
        // Wire form: 0 and 9 as before levels existed, the others numbers.
        let five = Priority::level(5).unwrap();
        assert_eq!(serde_json::to_string(&Priority::Rt).unwrap(), "\"rt\"");
        assert_eq!(serde_json::to_string(&Priority::Be).unwrap(), "\"be\"");
        assert_eq!(serde_json::to_string(&five).unwrap(), "5");
        for (text, want) in [
            ("\"rt\"", Priority::Rt),
            ("0", Priority::Rt),
            ("\"5\"", five),
            ("5", five),
        ] {
            assert_eq!(serde_json::from_str::<Priority>(text).unwrap(), want);
        }
        assert!(serde_json::from_str::<Priority>("12").is_err());
        assert!(five > Priority::Rt && !five.is_rt() && Priority::Rt.is_rt());
    }

    use super::*;

    #[test]
    fn the_infer_fast_path_agrees_with_the_general_parser() {
        let cases = [
            r#"{"id":7,"op":"infer","stream":3,"model":"vgg","wait":true}"#,
            r#"{"id":7,"op":"infer","stream":3,"model":"vgg"}"#,
            r#"{"op":"infer","model":"vgg","stream":3,"id":7,"wait":false}"#,
            r#"{"id":7,"op":"infer","stream":3,"model":"v\"g\u0067"}"#,
            r#"{"id":7,"op":"in\u0066er","stream":3,"model":"vgg"}"#,
            r#"{"id":7,"op":"infer","stream":3,"model":"vgg","extra":1}"#,
            r#"{"id":7,"op":"infer","stream":3,"stream":4,"model":"vgg"}"#,
            r#"{"id":7,"op":"infer","stream":-3,"model":"vgg"}"#,
            r#"{"id":7,"op":"infer","model":"vgg"}"#,
            r#"{"id":7,"op":"stats"}"#,
            r#"{"id":7,"op":"infer","stream":3,"model":7}"#,
            r#"[1,2]"#,
        ];
        for c in cases {
            let general = serde_json::from_slice::<Request>(c.as_bytes());
            match (parse_request(c.as_bytes()), general) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{c}"),
                (Err(_), Err(_)) => {}
                (a, b) => panic!("{c}: fast path {a:?}, general {b:?}"),
            }
        }
    }

    #[test]
    fn request_round_trip_and_wire_shape() {
        let r = Request {
            id: 7,
            body: RequestBody::Infer {
                stream: 3,
                model: "vgg".into(),
                wait: false,
                qos_ms: None,
            },
        };
        let frame = encode(&r);
        let mut d = FrameDecoder::new(DEFAULT_MAX_FRAME);
        d.push(&frame);
        let Some(Decoded::Frame(p)) = d.next_frame() else {
            panic!("no frame")
        };
        let v: serde_json::Value = serde_json::from_slice(&p).unwrap();
        assert_eq!(v["op"], "infer");
        assert_eq!(v["id"], 7);
        assert_eq!(parse_request(&p).unwrap(), r);
    }

    #[test]
    fn wait_defaults_to_true() {
        let r = parse_request(br#"{"id":1,"op":"infer","stream":2,"model":"vgg"}"#).unwrap();
        assert!(matches!(r.body, RequestBody::Infer { wait: true, .. }));
    }

    #[test]
    fn bad_request_keeps_id() {
        let e = parse_request(br#"{"id":9,"op":"fly"}"#).unwrap_err();
        assert_eq!(e.id, Some(9));
        let e = parse_request(b"\xff\x00").unwrap_err();
        assert_eq!(e.id, None);
        assert!(e.message.contains("not valid JSON"));
    }

    #[test]
    fn oversized_frame_is_skipped_and_stream_resyncs() {
        let mut d = FrameDecoder::new(16);
        let mut bytes = (100u32).to_be_bytes().to_vec();
        bytes.extend(std::iter::repeat_n(b'x', 100));
        bytes.extend(encode(&Request {
            id: 1,
            body: RequestBody::Stats,
        }));
        // Feed in small pieces to cover the skip path across pushes.
        let mut out = Vec::new();
        for chunk in bytes.chunks(7) {
            d.push(chunk);
            while let Some(f) = d.next_frame() {
                out.push(f);
            }
        }
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0], Decoded::TooLarge { len: 100 });
        // The stats request is 26 bytes: also over 16, so it is skipped too.
        assert!(matches!(out[1], Decoded::TooLarge { .. }));
        let mut d = FrameDecoder::new(64);
        let mut bytes = (100u32).to_be_bytes().to_vec();
        bytes.extend(std::iter::repeat_n(b'x', 100));
        let stats = encode(&Request {
            id: 1,
            body: RequestBody::Stats,
        });
        bytes.extend(&stats);
        for chunk in bytes.chunks(5) {
            d.push(chunk);
        }
        assert_eq!(d.next_frame(), Some(Decoded::TooLarge { len: 100 }));
        assert_eq!(d.next_frame(), Some(Decoded::Frame(stats[4..].to_vec())));
        assert_eq!(d.next_frame(), None);
    }
}

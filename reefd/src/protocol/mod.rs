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
        /// The input tensors (docs/protocol.md, "Tensors"): each inline,
        /// in the data section of this frame, or in a registered region.
        /// Absent: the request carries no data, and the device runs the
        /// model on inputs of its own (the simulator's version tracking; a
        /// GPU's seeded inputs checked against its references); no outputs
        /// are returned. Present (even empty): every input of the model
        /// must be given, and the outputs are returned.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        inputs: Option<Vec<TensorRef>>,
        /// Where outputs go in registered regions; outputs not named here
        /// come back inline in the answer's data section.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        outputs: Vec<OutputRef>,
    },
    /// Registers a shared-memory region: a memfd sealed against shrinking
    /// (F_SEAL_SHRINK), sent with this frame's bytes as SCM_RIGHTS
    /// ancillary data (REEF's RegisterBlob). The region belongs to the
    /// connection and lives until `unregister_region` or until the
    /// connection closes (requests in flight keep their mapping).
    RegisterRegion {
        /// Optional label for logs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
    },
    UnregisterRegion {
        region: u64,
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

/// One input tensor of an `infer` (docs/protocol.md, "Tensors"): its ONNX
/// name, element type, shape and where its bytes are. Without `region`
/// the bytes are inline: `offset` and `bytes` locate them in the data
/// section of the request's frame; with `region`, in that registered
/// region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorRef {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<u64>,
    #[serde(default)]
    pub offset: u64,
    pub bytes: u64,
}

/// Where an output of an `infer` goes: `bytes` at `offset` in registered
/// region `region` (REEF's GetBlob).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputRef {
    pub name: String,
    pub region: u64,
    #[serde(default)]
    pub offset: u64,
    pub bytes: u64,
}

/// An input or output a model declares (`models show --json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorSpec {
    /// The ONNX name (`image:0`, `probs/out`).
    pub name: String,
    /// numpy's name of the element type (`float32`, `int64`, `bool`, ...).
    pub dtype: String,
    pub shape: Vec<u64>,
}

impl TensorSpec {
    /// Bytes of the tensor (`None`: unknown dtype or overflow).
    pub fn bytes(&self) -> Option<u64> {
        let e = dtype_size(&self.dtype)?;
        self.shape.iter().try_fold(e, |acc, &d| acc.checked_mul(d))
    }
}

/// Bytes per element of a dtype named as numpy names it; `None` for a
/// name the protocol does not know.
pub fn dtype_size(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "bool" | "int8" | "uint8" => 1,
        "float16" | "bfloat16" | "int16" | "uint16" => 2,
        "float32" | "int32" | "uint32" => 4,
        "float64" | "int64" | "uint64" => 8,
        _ => return None,
    })
}

/// One output of a finished `infer` with data: inline at `offset` in the
/// answer's data section, or written to `region` at `offset` (as the
/// request's `outputs` asked).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputTensor {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<u64>,
    pub offset: u64,
    pub bytes: u64,
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
    /// The request did not reach the GPU before its start deadline (the
    /// Open Inference Protocol's `timeout`); it was not run.
    Timeout,
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
    RegionRegistered {
        region: u64,
        bytes: u64,
        /// Whether the daemon may write outputs into it (the memfd was
        /// sent open for writing).
        writable: bool,
    },
    RegionUnregistered {
        region: u64,
    },
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
    /// Where the time from completion to the client goes ([`Timeline`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Box<Timeline>>,
    /// How many times the task was preempted (and restored).
    pub preemptions: u32,
    /// Value tracking (DESIGN.md, simulator): whether the final outputs
    /// equal those of an unpreempted run, i.e. every restore was correct.
    /// Absent when the engine does not track values.
    pub outputs_verified: Option<bool>,
    /// The outputs of a request that carried inputs (empty otherwise, or
    /// when `outputs_missing` says why there are none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<OutputTensor>,
    /// Why a request with inputs got no outputs: the device does not
    /// compute this model's values (docs/protocol.md, "Where the bytes
    /// go"). Outputs are never made up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs_missing: Option<String>,
    /// The inline outputs' bytes: the frame's data section, not JSON
    /// (one buffer per inline output, in `outputs` order; a client may
    /// receive them as one buffer: see [`TaskResult::output_bytes`]).
    #[serde(skip)]
    pub data: Vec<Vec<u8>>,
    /// What the daemon holds for this answer until it is written (its
    /// count of the user's inline bytes); nothing on the wire.
    #[serde(skip)]
    pub hold: DataHold,
}

/// Instants after a task's completion, in ns of CLOCK_MONOTONIC
/// ([`monotonic_ns`]): where the time between completion and the client
/// goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeline {
    /// The task's last kernel completed on the device.
    pub done_ns: u64,
    /// The daemon saw it (caught the device up past it).
    pub seen_ns: u64,
    /// The connection's writer began writing the answer to the socket (0:
    /// not written by a connection's writer).
    #[serde(default)]
    pub written_ns: u64,
}

/// An opaque token an answer carries inside the daemon, released when the
/// answer is dropped (once written, or with its connection): the daemon
/// counts a user's inline tensor bytes until then. Equal to any other.
#[derive(Clone, Default)]
pub struct DataHold(pub Option<std::sync::Arc<dyn std::any::Any + Send + Sync>>);

impl PartialEq for DataHold {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for DataHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "DataHold(held)"
        } else {
            "DataHold"
        })
    }
}

impl TaskResult {
    /// The bytes of inline output `name` (`None`: no such inline output).
    pub fn output_bytes(&self, name: &str) -> Option<&[u8]> {
        let o = self
            .outputs
            .iter()
            .find(|o| o.name == name && o.region.is_none())?;
        // The data section, as one buffer or one per inline output.
        let mut base = 0u64;
        for d in &self.data {
            let end = base + d.len() as u64;
            if o.offset >= base && o.offset + o.bytes <= end {
                let a = (o.offset - base) as usize;
                return d.get(a..a + o.bytes as usize);
            }
            base = end;
        }
        None
    }
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

mod frame;
mod status;
#[cfg(test)]
mod tests;

pub use frame::*;
pub use status::*;

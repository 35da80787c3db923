//! What the daemon reports about itself: the answers to `hello`, `status`
//! and `stats` (devices, placement, models, streams, tasks, the policies'
//! own figures: Aker's, FIKIT's), as the native protocol carries them.

use super::*;

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
    /// The predictions are kernel times measured on the serving device at
    /// load (a GPU), not a simulated preset's (issue 26 item 6).
    #[serde(default)]
    pub predictions_measured: bool,
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
    /// The model's inputs and outputs, as an `infer` with tensors must
    /// give and gets them (empty for a measured REEF schedule without
    /// code, which takes no tensors).
    #[serde(default)]
    pub inputs: Vec<TensorSpec>,
    #[serde(default)]
    pub outputs: Vec<TensorSpec>,
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
    /// What the engine holds now: requests inside it and best-effort
    /// scheduler clients bound to streams (0 and 0 once every request is
    /// over: nothing outlives its requests; the test suite checks it after
    /// every daemon test).
    #[serde(default)]
    pub engine_tasks: u64,
    #[serde(default)]
    pub engine_clients_held: u64,
}

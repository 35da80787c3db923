//! The CUDA engine: the daemon's requests executed on a `cuda:N` device
//! through the CUDA launch path (backend/cuda_launch.rs), with REEF's
//! reset-based preemption (REEF §4.3, Fig. 8: `preempt()` resets the host
//! queue, sets the preempt flag, reads the execution index, clears the flag;
//! §3.1 real-time mode: a real-time (RT) request preempts best-effort (BE)
//! work on arrival, and BE work resumes from its first evicted kernel when
//! no RT request is left, §4.4). §4.6 (closed-source GPUs) is the launch
//! path's business: the PTX is injected at load and the level-3 kill is not
//! available there (`cuda_launch::NO_KILL`).
//!
//! Priorities: a stream's level 0 (`rt`) runs in the RT context and
//! preempts; levels 1..=9 (`be` = 9) run in the BE context and are
//! preempted, as REEF's policies serve them on the simulated GPU
//! (docs/daemon.md, "Priorities"). There is no order among BE levels here.
//!
//! What this is not (yet): the reef-sched core. The policy is REEF's rule
//! written out (RT arrives: preempt the BE streams; RT idle: restore them),
//! with level 2 the highest level the launch path has, and no dynamic
//! kernel padding (REEF §5): the engine serves `reef-nodkp` (asked for
//! `reef`, it says so). Driving the CUDA device with the same reef-sched
//! core as the simulator needs the device interface of issue 18 item 1
//! (one event loop for the benchmark and the daemon), left for that
//! refactor.
//!
//! Models: the runtime loads a model's REEF schedule (`<dir>/<name>.json`),
//! and this engine loads the same directory's CUDA model: a reef-compile
//! output (the same `<name>.json` with its PTX and weights) or a hand-written
//! `model.toml` (PTX, weights, launch shapes), whose kernels must agree. The protocol carries no input
//! tensors today, so the input of task `t` is seed `t % INPUT_SEEDS`'s bytes
//! (a documented deterministic function), and every output is compared with
//! that seed's output computed unpreempted at load (`verified` in
//! `TaskDone`, counted by the metrics as corrupted outputs when false).
//!
//! No sleeps, no waiting: the reference outputs are requests on a private
//! BE stream that no preemption names, queued at load and collected by
//! [`Engine::advance`] like any other; a request that finishes before its
//! reference is held (its completion time kept) until the reference is
//! known. The driver calls that do wait are the launch path's own:
//! `cuStreamSynchronize` inside a preemption (Fig. 8 waits for the device
//! queue to drain of evicted kernels and of kernels past the flag check)
//! and when a stream is closed.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Instant;

use super::{Engine, EngineError, EngineEvent, EngineInfo, EngineModel, Nanos, TaskProgress};
use crate::backend::cuda_launch::{
    Completion, CudaDevice, CudaError, CudaLaunchOptions, StreamClass,
};
use crate::protocol::{Priority, TaskState};

/// Distinct inputs a model's requests cycle through (each verified against
/// its unpreempted output, computed at load).
pub const INPUT_SEEDS: u64 = 8;
/// How often a busy device's completion events are queried: 20 us, the
/// order of one kernel's launch path (docs/simulator.md: 4 us host + 4 us
/// fetch + 2 us dispatch) so that a completion is seen within about one
/// kernel launch.
pub const POLL_NS: Nanos = 20_000;
/// The stream the engine computes reference outputs on (never a daemon
/// stream id: those count up from 1).
const REFERENCE_STREAM: u64 = u64::MAX;

/// The input bytes of seed `seed`: a fixed function, so a request's output
/// can be compared with the reference computed for its seed.
pub fn input(seed: u64, bytes: usize) -> Vec<u8> {
    (0..bytes)
        .map(|i| (seed.wrapping_mul(131).wrapping_add(i as u64 * 7) % 251) as u8)
        .collect()
}

/// Which context a priority level runs in (level 0 real-time, 1..=9 BE).
pub fn class(p: Priority) -> StreamClass {
    if p.is_rt() {
        StreamClass::RealTime
    } else {
        StreamClass::BestEffort
    }
}

/// A daemon request on the device.
struct Pending {
    task: u64,
    stream: u64,
    model: String,
    seed: u64,
    first_reported: bool,
}

/// `cuda:N` executing the daemon's work.
pub struct CudaEngine {
    dev: CudaDevice,
    policy: String,
    streams: HashMap<u64, Priority>,
    /// device task id -> the daemon's request
    tasks: HashMap<u64, Pending>,
    by_runtime: HashMap<u64, u64>,
    /// (model, seed) -> the unpreempted output
    expected: HashMap<(String, u64), Vec<u8>>,
    /// device task id -> (model, seed) of a reference request in flight
    references: HashMap<u64, (String, u64)>,
    /// Daemon requests finished before their reference: (task, model,
    /// seed, output, finished at).
    held: Vec<(u64, String, u64, Vec<u8>, Nanos)>,
    /// BE streams are preempted because RT work is present.
    rt_preempted: bool,
    /// BE streams preempted by command, until `resume`.
    commanded: HashSet<u64>,
    /// Daemon tasks (runtime ids) whose kernels a preemption took back,
    /// reported as restored when their stream transmits again.
    preempted_tasks: HashSet<u64>,
    /// `dev.launches()` already reported as `KernelsLaunched`.
    launches_seen: u64,
    last_now: Nanos,
}

fn err(e: CudaError) -> EngineError {
    EngineError::Invalid(e.to_string())
}

/// The directory of a model's schedule, which holds its CUDA model.
fn model_dir(name: &str, m: &reef_model::Model) -> Result<PathBuf, EngineError> {
    m.path
        .parent()
        .map(|p| p.to_path_buf())
        .ok_or_else(|| EngineError::Invalid(format!("model {name}: no directory")))
}

impl CudaEngine {
    /// Opens `cuda:index` (loading `library` first when given) for
    /// `policy`: `reef-nodkp`, or `reef`, served as `reef-nodkp` (no
    /// padding on this path).
    pub fn open(
        index: u32,
        library: Option<PathBuf>,
        queue_cap: usize,
        policy: &str,
    ) -> Result<Self, EngineError> {
        let policy = Self::check_policy(policy)?;
        let dev = CudaDevice::open(&CudaLaunchOptions {
            index,
            library,
            queue_cap,
        })
        .map_err(err)?;
        Ok(Self::with_device(dev, policy))
    }

    /// An engine on an already opened device.
    pub fn with_device(dev: CudaDevice, policy: String) -> Self {
        CudaEngine {
            launches_seen: dev.launches(),
            dev,
            policy,
            streams: HashMap::new(),
            tasks: HashMap::new(),
            by_runtime: HashMap::new(),
            expected: HashMap::new(),
            references: HashMap::new(),
            held: Vec::new(),
            rt_preempted: false,
            commanded: HashSet::new(),
            preempted_tasks: HashSet::new(),
            last_now: 0,
        }
    }

    fn check_policy(policy: &str) -> Result<String, EngineError> {
        match policy {
            "reef" | "reef-nodkp" => Ok("reef-nodkp".into()),
            _ => Err(EngineError::Unsupported(format!(
                "policy {policy}: the cuda engine runs REEF's reset-based preemption only \
                 (reef-nodkp; reef is served as reef-nodkp, without padding); the other \
                 policies run on the simulated GPU, --device sim:gv100"
            ))),
        }
    }

    pub fn device(&self) -> &CudaDevice {
        &self.dev
    }

    /// Whether every loaded model's reference outputs are known.
    pub fn references_done(&self) -> bool {
        self.references.is_empty()
    }

    /// The daemon's BE streams not paused.
    fn be_streams(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .streams
            .iter()
            .filter(|(id, p)| !p.is_rt() && !self.dev.paused(**id))
            .map(|(&id, _)| id)
            .collect();
        v.sort_unstable();
        v
    }

    /// Preempts `ids` (BE streams); reports the preemption when it stopped
    /// work. Returns the kernels taken back.
    fn preempt_streams(
        &mut self,
        now: Nanos,
        ids: &[u64],
        out: &mut Vec<EngineEvent>,
    ) -> Result<u64, EngineError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let p = match self.dev.preempt(ids) {
            Ok(p) => p,
            Err(e) => {
                self.device_error(&format!("preempt streams {ids:?}"), &e, out);
                return Err(err(e));
            }
        };
        let kernels = p.host_queue + p.evicted;
        // A preemption that stopped BE work is counted, with the kernels it
        // took back (0 when every kernel on the device had passed the flag
        // check: they finish, and the stream's next kernels wait).
        if p.stopped > 0 {
            out.push(EngineEvent::Preempted {
                level: p.level.number(),
                kernels,
            });
        }
        for t in p.tasks {
            if let Some(pd) = self.tasks.get(&t) {
                self.preempted_tasks.insert(pd.task);
            }
        }
        let parked = self.dev.take_parked();
        self.finish(now, parked, out);
        Ok(kernels)
    }

    /// Resumes `ids`, reporting the restores of their preempted tasks.
    fn restore_streams(&mut self, ids: &[u64], out: &mut Vec<EngineEvent>) {
        self.dev.restore(ids);
        let restored: Vec<u64> = self
            .tasks
            .values()
            .filter(|p| ids.contains(&p.stream) && self.preempted_tasks.contains(&p.task))
            .map(|p| p.task)
            .collect();
        for task in restored {
            self.preempted_tasks.remove(&task);
            out.push(EngineEvent::Restored { task });
        }
    }

    fn finish(&mut self, now: Nanos, done: Vec<Completion>, out: &mut Vec<EngineEvent>) {
        for c in done {
            if let Some(key) = self.references.remove(&c.task) {
                self.expected.insert(key, c.output);
                continue;
            }
            let Some(p) = self.tasks.remove(&c.task) else {
                continue;
            };
            self.by_runtime.remove(&p.task);
            self.preempted_tasks.remove(&p.task);
            if !p.first_reported {
                // Launched and completed between two polls.
                out.push(EngineEvent::FirstKernelQueued {
                    task: p.task,
                    at: now,
                    issued: Instant::now(),
                });
            }
            self.held.push((p.task, p.model, p.seed, c.output, now));
        }
        // Release what can be verified (or never will: the model is gone).
        let mut i = 0;
        while i < self.held.len() {
            let (_, model, seed, ..) = &self.held[i];
            let key = (model.clone(), *seed);
            let waiting = self.references.values().any(|r| *r == key);
            if waiting {
                i += 1;
                continue;
            }
            let (task, model, seed, output, at) = self.held.swap_remove(i);
            let verified = self.expected.get(&(model, seed)).map(|e| *e == output);
            out.push(EngineEvent::TaskDone { task, at, verified });
        }
    }

    /// Queues every missing reference of the loaded models on the
    /// reference stream (opened on first use, closed when idle).
    fn queue_references(&mut self, models: &[String]) -> Result<(), CudaError> {
        for name in models {
            let Some(bytes) = self.dev.input_bytes(name) else {
                continue;
            };
            for seed in 0..INPUT_SEEDS {
                let key = (name.clone(), seed);
                if self.expected.contains_key(&key) || self.references.values().any(|r| *r == key) {
                    continue;
                }
                if !self.dev.has_stream(REFERENCE_STREAM) {
                    self.dev
                        .open_stream(REFERENCE_STREAM, StreamClass::BestEffort)?;
                }
                let t = self
                    .dev
                    .submit(REFERENCE_STREAM, name, input(seed, bytes))?;
                self.references.insert(t, key);
            }
        }
        Ok(())
    }

    /// Reports a driver error (the runtime counts and logs it).
    fn device_error(&self, action: &str, e: &CudaError, out: &mut Vec<EngineEvent>) {
        out.push(EngineEvent::DeviceError {
            action: format!("{}: {action}", self.dev.device()),
            error: e.to_string(),
        });
    }

    fn poll_device(&mut self, now: Nanos, out: &mut Vec<EngineEvent>) {
        let mut done = self.dev.take_parked();
        done.extend(self.dev.poll());
        for f in self.dev.take_failed() {
            if let Some((model, seed)) = self.references.remove(&f.task) {
                // Requests of this seed are answered unverified.
                let action = format!("reference output of {model} (input seed {seed})");
                self.device_error(&action, &f.error, out);
                continue;
            }
            let Some(p) = self.tasks.remove(&f.task) else {
                continue;
            };
            self.by_runtime.remove(&p.task);
            self.preempted_tasks.remove(&p.task);
            let action = format!("task {} ({} on stream {})", p.task, p.model, p.stream);
            self.device_error(&action, &f.error, out);
            out.push(EngineEvent::TaskFailed {
                task: p.task,
                reason: format!("{}: {}", self.dev.device(), f.error),
            });
        }
        for (t, issued) in self.dev.take_started() {
            if let Some(p) = self.tasks.get_mut(&t) {
                p.first_reported = true;
                out.push(EngineEvent::FirstKernelQueued {
                    task: p.task,
                    at: now,
                    issued,
                });
            }
        }
        let l = self.dev.launches();
        if l > self.launches_seen {
            out.push(EngineEvent::KernelsLaunched {
                count: l - self.launches_seen,
            });
            self.launches_seen = l;
        }
        self.finish(now, done, out);
    }
}

impl Engine for CudaEngine {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            name: format!(
                "REEF reset-based preemption on {} ({}) through cudarc",
                self.dev.device(),
                self.dev.gpu_name()
            ),
            policy: self.policy.clone(),
            preemption_levels: self.dev.levels().numbers(),
        }
    }

    fn preemption_notes(&self) -> Vec<String> {
        self.dev.levels().notes.clone()
    }

    /// What [`CudaDevice::load_model`] checks against the free memory: the
    /// weights and one request's buffers in both contexts.
    fn model_memory(&self, m: &EngineModel) -> Option<Result<u64, EngineError>> {
        Some(
            model_dir(&m.name, &m.model)
                .and_then(|dir| self.dev.read_model(&dir).map_err(err))
                .map(|f| CudaDevice::footprint(&f)),
        )
    }

    /// `cuMemGetInfo` in the device's context.
    fn device_memory(&self) -> Option<(u64, u64)> {
        self.dev.memory().ok()
    }

    fn set_policy(&mut self, _now: Nanos, policy: &str) -> Result<(), EngineError> {
        self.policy = Self::check_policy(policy)?;
        Ok(())
    }

    fn add_model(&mut self, m: EngineModel) -> Result<(), EngineError> {
        let dir = model_dir(&m.name, &m.model)?;
        let files = self.dev.read_model(&dir).map_err(err)?;
        let names: Vec<&str> = m.model.kernels.iter().map(|k| k.name.as_str()).collect();
        if names != files.kernel_names() {
            return Err(EngineError::Invalid(format!(
                "model {}: the schedule's kernels {names:?} differ from the CUDA model's {:?} \
                 (model.toml)",
                m.name,
                files.kernel_names()
            )));
        }
        let name = self.dev.load_model(&dir, Some(&m.name)).map_err(err)?;
        if let Err(e) = self.queue_references(std::slice::from_ref(&name)) {
            self.references.retain(|_, (model, _)| *model != name);
            if self.dev.has_stream(REFERENCE_STREAM) {
                let _ = self.dev.close_stream(REFERENCE_STREAM);
                self.references.clear();
            }
            let _ = self.dev.unload_model(&name);
            return Err(err(e));
        }
        Ok(())
    }

    fn remove_model(&mut self, name: &str) {
        if self.references.values().any(|(m, _)| m == name) {
            // Its references are still queued: drop the reference stream
            // (waiting for what is on the device) and queue the other
            // models' again.
            if let Err(e) = self.dev.close_stream(REFERENCE_STREAM) {
                tracing::error!("closing the reference stream on {}: {e}", self.dev.device());
            }
            self.references.clear();
            let others: Vec<String> = self
                .dev
                .models()
                .into_iter()
                .filter(|m| m != name)
                .collect();
            if let Err(e) = self.queue_references(&others) {
                tracing::error!("re-queueing reference outputs: {e}");
            }
        }
        if let Err(e) = self.dev.unload_model(name) {
            tracing::warn!("unloading {name} from {}: {e}", self.dev.device());
        }
        self.expected.retain(|(m, _), _| m != name);
    }

    fn open_stream(&mut self, stream: u64, priority: Priority) -> Result<(), EngineError> {
        self.dev.open_stream(stream, class(priority)).map_err(err)?;
        self.streams.insert(stream, priority);
        // A BE stream opened during real-time mode waits like the others.
        if !priority.is_rt() && self.rt_preempted {
            let mut out = Vec::new();
            self.preempt_streams(self.last_now, &[stream], &mut out)?;
        }
        Ok(())
    }

    fn close_stream(&mut self, _now: Nanos, stream: u64, out: &mut Vec<EngineEvent>) -> Vec<u64> {
        self.streams.remove(&stream);
        self.commanded.remove(&stream);
        if let Err(e) = self.dev.close_stream(stream) {
            self.device_error(&format!("close stream {stream}"), &e, out);
        }
        let mut tasks = Vec::new();
        self.tasks.retain(|_, p| {
            if p.stream == stream {
                tasks.push(p.task);
                false
            } else {
                true
            }
        });
        for t in &tasks {
            self.by_runtime.remove(t);
            self.preempted_tasks.remove(t);
        }
        tasks
    }

    fn submit(
        &mut self,
        now: Nanos,
        task: u64,
        stream: u64,
        model: &str,
        out: &mut Vec<EngineEvent>,
    ) -> Result<(), EngineError> {
        let priority = *self
            .streams
            .get(&stream)
            .ok_or_else(|| EngineError::NotFound(format!("no stream {stream}")))?;
        let bytes = self
            .dev
            .input_bytes(model)
            .ok_or_else(|| EngineError::NotFound(format!("model {model} is not loaded")))?;
        let seed = task % INPUT_SEEDS;
        let t = self
            .dev
            .submit(stream, model, input(seed, bytes))
            .map_err(err)?;
        self.tasks.insert(
            t,
            Pending {
                task,
                stream,
                model: model.to_string(),
                seed,
                first_reported: false,
            },
        );
        self.by_runtime.insert(task, t);
        // REEF §3.1: an RT request switches to real-time mode at once.
        if priority.is_rt() {
            self.rt_preempted = true;
            let be = self.be_streams();
            if let Err(e) = self.preempt_streams(now, &be, out) {
                tracing::error!("preempting BE for RT task {task}: {e}");
            }
        }
        self.advance(now, out);
        Ok(())
    }

    fn preempt(
        &mut self,
        now: Nanos,
        stream: u64,
        out: &mut Vec<EngineEvent>,
    ) -> Result<u64, EngineError> {
        match self.streams.get(&stream) {
            None => Err(EngineError::NotFound(format!("no stream {stream}"))),
            Some(p) if p.is_rt() => Err(EngineError::Invalid(format!(
                "stream {stream} is real-time; only best-effort streams are preempted"
            ))),
            Some(_) => {
                self.commanded.insert(stream);
                self.preempt_streams(now, &[stream], out)
            }
        }
    }

    fn resume(
        &mut self,
        now: Nanos,
        stream: u64,
        out: &mut Vec<EngineEvent>,
    ) -> Result<(), EngineError> {
        if !self.streams.contains_key(&stream) {
            return Err(EngineError::NotFound(format!("no stream {stream}")));
        }
        // Resuming a stream that is not preempted by command is a no-op.
        if self.commanded.remove(&stream) && !self.rt_preempted {
            self.restore_streams(&[stream], out);
        }
        self.advance(now, out);
        Ok(())
    }

    fn advance(&mut self, now: Nanos, out: &mut Vec<EngineEvent>) {
        self.last_now = self.last_now.max(now);
        self.poll_device(now, out);
        if self.rt_preempted && !self.dev.rt_busy() {
            // RT idle: BE resumes (REEF §3.1), except streams held by command.
            self.rt_preempted = false;
            let ids: Vec<u64> = self
                .streams
                .iter()
                .filter(|(id, p)| !p.is_rt() && !self.commanded.contains(id))
                .map(|(&id, _)| id)
                .collect();
            self.restore_streams(&ids, out);
            self.poll_device(now, out);
        }
        if self.references.is_empty()
            && self.dev.has_stream(REFERENCE_STREAM)
            && self.dev.queue_depths(REFERENCE_STREAM) == (0, 0)
        {
            if let Err(e) = self.dev.close_stream(REFERENCE_STREAM) {
                self.device_error("close the reference stream", &e, out);
            }
        }
    }

    fn next_event_time(&self) -> Option<Nanos> {
        self.dev.busy().then_some(self.last_now + POLL_NS)
    }

    fn queue_depths(&self, stream: u64) -> (usize, usize) {
        self.dev.queue_depths(stream)
    }

    fn task_progress(&self, task: u64) -> Option<TaskProgress> {
        let t = self.by_runtime.get(&task)?;
        let (next_kernel, kernels, running) = self.dev.task_progress(*t)?;
        Some(TaskProgress {
            state: if running {
                TaskState::Running
            } else {
                TaskState::Queued
            },
            next_kernel,
            kernels,
        })
    }
}

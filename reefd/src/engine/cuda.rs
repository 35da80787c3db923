//! The CUDA engine: the daemon's requests executed on a `cuda:N` device
//! through the CUDA launch path (backend/cuda_launch.rs), with REEF's
//! reset-based preemption (REEF §4, Fig. 8; §3.1 real-time mode: a
//! real-time (RT) request preempts best-effort (BE) work on arrival, and BE
//! work resumes when no RT request is left).
//!
//! What this is not (yet): the reef-sched core. The policy here is REEF's
//! rule written out in a few lines (RT arrives: `preempt_be`; RT idle:
//! `restore_be`), with level 2 the highest level the launch path has, and
//! no dynamic kernel padding. Driving the CUDA device with the same
//! reef-sched core as the simulator needs the device interface of issue 18
//! item 1 (one event loop for the benchmark and the daemon), left for that
//! refactor.
//!
//! Models: the runtime loads a model's REEF schedule (`<dir>/<name>.json`),
//! and this engine loads the same directory's `model.toml` (PTX, weights,
//! launch shapes); their kernels must agree. The protocol carries no input
//! tensors today, so the input of task `t` is seed `t % INPUT_SEEDS`'s bytes
//! (a documented deterministic function), and every output is compared with
//! that seed's output computed unpreempted at load (`verified` in
//! `TaskDone`, counted by the metrics as corrupted outputs when false).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use super::{Engine, EngineError, EngineEvent, EngineInfo, EngineModel, Nanos, TaskProgress};
use crate::backend::cuda_launch::{CudaDevice, CudaError, CudaLaunchOptions, StreamClass};
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

fn input(seed: u64, bytes: usize) -> Vec<u8> {
    (0..bytes)
        .map(|i| (seed.wrapping_mul(131).wrapping_add(i as u64 * 7) % 251) as u8)
        .collect()
}

/// `cuda:N` executing the daemon's work.
pub struct CudaEngine {
    dev: CudaDevice,
    streams: HashMap<u64, Priority>,
    /// device task id -> (runtime task, stream, model, seed)
    tasks: HashMap<u64, (u64, u64, String, u64)>,
    by_runtime: HashMap<u64, u64>,
    expected: HashMap<(String, u64), Vec<u8>>,
    /// BE preempted by RT arrival (restored when RT is idle).
    rt_preempted: bool,
    /// BE streams preempted by command, until `resume`.
    commanded: HashSet<u64>,
    last_now: Nanos,
}

fn err(e: CudaError) -> EngineError {
    EngineError::Invalid(e.to_string())
}

impl CudaEngine {
    /// Opens `cuda:index` (loading `library` first when given).
    pub fn open(index: u32, library: Option<PathBuf>, queue_cap: usize) -> Result<Self, CudaError> {
        let dev = CudaDevice::open(&CudaLaunchOptions {
            index,
            library,
            queue_cap,
        })?;
        Ok(CudaEngine {
            dev,
            streams: HashMap::new(),
            tasks: HashMap::new(),
            by_runtime: HashMap::new(),
            expected: HashMap::new(),
            rt_preempted: false,
            commanded: HashSet::new(),
            last_now: 0,
        })
    }

    pub fn device(&self) -> &CudaDevice {
        &self.dev
    }

    fn preempt_be(&mut self, out: &mut Vec<EngineEvent>) -> Result<u64, EngineError> {
        let p = self.dev.preempt_be().map_err(err)?;
        let kernels = p.host_queue + p.evicted;
        out.push(EngineEvent::Preempted {
            level: p.level.number(),
            kernels,
        });
        Ok(kernels)
    }

    fn finish(&mut self, now: Nanos, done: Vec<crate::backend::cuda_launch::Completion>, out: &mut Vec<EngineEvent>) {
        for c in done {
            if let Some((task, _, model, seed)) = self.tasks.remove(&c.task) {
                self.by_runtime.remove(&task);
                let verified = self.expected.get(&(model, seed)).map(|e| *e == c.output);
                out.push(EngineEvent::TaskDone {
                    task,
                    at: now,
                    verified,
                });
            }
        }
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
            policy: "reef".into(),
            preemption_levels: self.dev.levels().numbers(),
        }
    }

    fn set_policy(&mut self, _now: Nanos, policy: &str) -> Result<(), EngineError> {
        if policy == "reef" {
            return Ok(());
        }
        Err(EngineError::Unsupported(format!(
            "policy {policy}: the cuda engine runs REEF's reset-based preemption only (the other \
             policies run on the simulated GPU, --device sim:gv100)"
        )))
    }

    fn add_model(&mut self, m: EngineModel) -> Result<(), EngineError> {
        let dir = m
            .model
            .path
            .parent()
            .ok_or_else(|| EngineError::Invalid(format!("model {}: no directory", m.name)))?
            .to_path_buf();
        let name = self.dev.load_model(&dir, Some(&m.name)).map_err(err)?;
        let files = crate::backend::cuda_launch::ModelFiles::read(&dir).map_err(err)?;
        let names: Vec<&str> = m.model.kernels.iter().map(|k| k.name.as_str()).collect();
        if names != files.kernel_names() {
            let _ = self.dev.unload_model(&name);
            return Err(EngineError::Invalid(format!(
                "model {name}: the schedule's kernels {names:?} differ from model.toml's {:?}",
                files.kernel_names()
            )));
        }
        // Reference outputs, unpreempted, on a private BE stream.
        let bytes = files.input_bytes();
        let r = (|| -> Result<(), CudaError> {
            self.dev.open_stream(REFERENCE_STREAM, StreamClass::BestEffort)?;
            for seed in 0..INPUT_SEEDS {
                let t = self.dev.submit(REFERENCE_STREAM, &name, input(seed, bytes))?;
                loop {
                    let done = self.dev.poll()?;
                    if let Some(c) = done.into_iter().find(|c| c.task == t) {
                        self.expected.insert((name.clone(), seed), c.output);
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_nanos(POLL_NS));
                }
            }
            self.dev.close_stream(REFERENCE_STREAM)?;
            Ok(())
        })();
        if let Err(e) = r {
            let _ = self.dev.close_stream(REFERENCE_STREAM);
            let _ = self.dev.unload_model(&name);
            return Err(err(e));
        }
        Ok(())
    }

    fn remove_model(&mut self, name: &str) {
        if let Err(e) = self.dev.unload_model(name) {
            tracing::warn!("unloading {name} from {}: {e}", self.dev.device());
        }
        self.expected.retain(|(m, _), _| m != name);
    }

    fn open_stream(&mut self, stream: u64, priority: Priority) -> Result<(), EngineError> {
        let class = match priority {
            Priority::Rt => StreamClass::RealTime,
            Priority::Be => StreamClass::BestEffort,
        };
        self.dev.open_stream(stream, class).map_err(err)?;
        self.streams.insert(stream, priority);
        Ok(())
    }

    fn close_stream(&mut self, _now: Nanos, stream: u64, _out: &mut Vec<EngineEvent>) -> Vec<u64> {
        self.streams.remove(&stream);
        self.commanded.remove(&stream);
        let dropped = match self.dev.close_stream(stream) {
            Ok(d) => d,
            Err(e) => {
                tracing::error!("closing stream {stream} on {}: {e}", self.dev.device());
                Vec::new()
            }
        };
        let mut tasks = Vec::new();
        self.tasks.retain(|_, (task, s, _, _)| {
            if *s == stream {
                tasks.push(*task);
                false
            } else {
                true
            }
        });
        for t in &tasks {
            self.by_runtime.remove(t);
        }
        debug_assert!(dropped.iter().all(|d| !self.tasks.contains_key(d)));
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
        let t = self.dev.submit(stream, model, input(seed, bytes)).map_err(err)?;
        self.tasks.insert(t, (task, stream, model.to_string(), seed));
        self.by_runtime.insert(task, t);
        // REEF §3.1: an RT request switches to real-time mode at once.
        if priority == Priority::Rt && !self.rt_preempted {
            self.preempt_be(out)?;
            self.rt_preempted = true;
        }
        self.advance(now, out);
        out.push(EngineEvent::FirstKernelQueued {
            task,
            at: now,
            issued: std::time::Instant::now(),
        });
        Ok(())
    }

    fn preempt(&mut self, _now: Nanos, stream: u64, out: &mut Vec<EngineEvent>) -> Result<u64, EngineError> {
        match self.streams.get(&stream) {
            None => Err(EngineError::NotFound(format!("no stream {stream}"))),
            Some(Priority::Rt) => Err(EngineError::Invalid(format!(
                "stream {stream} is real-time; only best-effort streams are preempted"
            ))),
            Some(Priority::Be) => {
                // The flag is per BE context: every BE stream is preempted
                // and stays so until this stream is resumed.
                self.commanded.insert(stream);
                self.preempt_be(out)
            }
        }
    }

    fn resume(&mut self, now: Nanos, stream: u64, out: &mut Vec<EngineEvent>) -> Result<(), EngineError> {
        if !self.commanded.remove(&stream) {
            return Err(EngineError::Invalid(format!("stream {stream} is not preempted")));
        }
        self.advance(now, out);
        Ok(())
    }

    fn advance(&mut self, now: Nanos, out: &mut Vec<EngineEvent>) {
        self.last_now = self.last_now.max(now);
        let mut done = self.dev.take_parked();
        match self.dev.poll() {
            Ok(d) => done.extend(d),
            Err(e) => tracing::error!("{}: {e}", self.dev.device()),
        }
        self.finish(now, done, out);
        if self.rt_preempted && !self.dev.rt_busy() {
            self.rt_preempted = false;
        }
        if !self.rt_preempted && self.commanded.is_empty() && self.dev.be_paused() {
            self.dev.restore_be();
            match self.dev.poll() {
                Ok(d) => self.finish(now, d, out),
                Err(e) => tracing::error!("{}: {e}", self.dev.device()),
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
            state: if running { TaskState::Running } else { TaskState::Queued },
            next_kernel,
            kernels,
        })
    }
}

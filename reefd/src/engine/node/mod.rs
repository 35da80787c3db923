//! An engine over a node of several devices (issue 16 items 4 and 5, issue
//! 18 for CUDA GPUs; CASE/MGB,
//! ../shared/papers/case-mgb-compiler-guided-sharing.txt, §III-C Algorithm
//! 3 and §IV; DESIGN.md layer 3, "place first, then schedule inside the
//! device").
//!
//! One engine per device runs REEF inside that device exactly as on a
//! single GPU (REEF §3.1, Fig. 5): a [`SchedEngine`] per simulated device
//! (`sim:mi50x4`, [`NodeEngine::new`]), one on the kernel-level CUDA
//! device ([`CudaEngine`], engine/gpu.rs) per NVIDIA GPU
//! (`cuda:0,cuda:1`, [`NodeEngine::cuda`]); this engine only decides where
//! things go, the same way for both:
//! - **models** are placed at load time by `reef_sched::place::Placer` under
//!   Algorithm 3 (memory-safe, most available warps; the prose rule, see
//!   docs/scheduler.md "Placement across devices"), each model declaring
//!   the footprint of a neural-network job of §V-E: its buffers (weights
//!   and activations) + a 256 MiB convolution workspace + a 300 MiB
//!   framework context (both assumed, the same figures as
//!   `reef-bench multigpu`'s `jobs::nn_job`, docs/results-multigpu.md) and
//!   its widest kernel's launch shape. On CUDA GPUs a model declares what
//!   the CUDA engine allocates for it instead (its weights and one
//!   request's buffers, in its one context,
//!   `CudaDevice::footprint`), the SM figures come from the driver
//!   (`cuDeviceGetAttribute`) and the free memory is the smaller of what
//!   placement has not reserved and what the driver reports free
//!   (`cuMemGetInfo` in the device's context, asked before every
//!   placement: memory other processes or the driver hold is not placed
//!   on). A model that fits no device's free memory is refused with the
//!   figures; [`NodeEngine::add_model_on`] pins a model to one device.
//! - **streams** are bound to a device at their first inference, among the
//!   devices holding the model: a real-time stream to the one with the
//!   fewest real-time streams (REEF serves one real-time queue per device
//!   and preempts best-effort work for it, so a real-time client alone
//!   among real-time clients waits only behind its own requests: the rule
//!   of `place_inference_clients`), a best-effort stream to the one with
//!   the fewest streams (ties: lowest index). Since a model is loaded on one
//!   device, that device is its holder; a stream that later asks for a
//!   model held elsewhere is opened on that device too (one client, one
//!   stream per device it uses; REEF's queues stay per device).
//! - **tasks** declared through `task_begin`/`task_end` (§III-A, §IV) are
//!   placed by the same placer, so their memory and the models' memory are
//!   accounted together and never oversubscribe a device.

use super::sched::{SchedEngine, SchedSettings};
use super::{
    Engine, EngineError, EngineEvent, EngineInfo, EngineModel, LoadTicket, Nanos, PaddingCounters,
    TaskProgress,
};
use crate::device::cuda::engine::CudaEngine;
use crate::protocol::{DeviceStatus, PlacementStats, Priority};
use reef_sched::place::{Begin, DeviceIdx, JobId, PlacePolicy, Placer, TaskId, TaskNeeds};
use reef_sim::DeviceSpec;
use std::collections::HashMap;

const MIB: u64 = 1 << 20;
/// The footprint a model declares (buffers + assumed workspace and
/// context): the same figures as `reef-bench multigpu`, defined once in
/// reef-sched's placement module.
pub use reef_sched::place::{model_needs, NN_CONTEXT, NN_WORKSPACE};

/// Placer job that owns the models' reservations.
const MODELS_JOB: JobId = JobId(0);
/// Placer task ids of models start here; task_begin ids are below it.
const MODEL_TASK_BASE: u64 = 1 << 62;

/// Placement's view of a simulated device.
pub use reef_exec::device_limits as limits;

struct StreamRec {
    priority: Priority,
    /// Devices the stream is open on, in the order it first used them.
    devs: Vec<DeviceIdx>,
}

/// A node of several devices, REEF inside each.
pub struct NodeEngine {
    /// What executes the work ([`EngineInfo::name`]).
    name: String,
    /// Each device as `reefctl status` names it (`mi50`, `cuda:1`).
    labels: Vec<String>,
    devs: Vec<Box<dyn Engine>>,
    /// What a model's declared memory is made of (for refusals).
    footprint: String,
    placer: Placer,
    /// model name -> (device, placer task).
    models: HashMap<String, (DeviceIdx, TaskId)>,
    next_model_task: u64,
    streams: HashMap<u64, StreamRec>,
    tasks: HashMap<u64, DeviceIdx>,
    counters: PlacementStats,
    /// Data of tasks not yet submitted ([`Engine::set_data`]).
    data: HashMap<u64, std::sync::Arc<crate::tensors::RequestData>>,
}

impl NodeEngine {
    /// One engine per device of `presets` (device `i` seeded `seed + i`).
    pub fn new(presets: &[String], settings: SchedSettings) -> Result<Self, EngineError> {
        if presets.is_empty() {
            return Err(EngineError::Invalid(
                "a node needs at least one device".into(),
            ));
        }
        let mut devs: Vec<Box<dyn Engine>> = Vec::new();
        let mut lims = Vec::new();
        for (i, p) in presets.iter().enumerate() {
            let spec = DeviceSpec::preset(p)
                .map_err(|e| EngineError::Invalid(format!("device sim:{p}: {e}")))?;
            lims.push(limits(&spec));
            devs.push(Box::new(SchedEngine::new(SchedSettings {
                preset: p.clone(),
                seed: settings.seed.wrapping_add(i as u64),
                ..settings.clone()
            })?));
        }
        let name = format!(
            "reef-sched on a node of {} reef-sim devices ({}), placement MGB Alg.3 (wall clock)",
            presets.len(),
            presets.join(",")
        );
        Self::with_devices(
            name,
            presets.to_vec(),
            devs,
            lims,
            format!(
                "buffers + {} MiB workspace + {} MiB context",
                NN_WORKSPACE / MIB,
                NN_CONTEXT / MIB
            ),
        )
    }

    /// A node of opened CUDA GPUs (`cuda:0,cuda:1`), one [`CudaEngine`]
    /// each; placement's SM figures come from each GPU's driver and its
    /// memory from `cuMemGetInfo`.
    pub fn cuda(engines: Vec<CudaEngine>) -> Result<Self, EngineError> {
        if engines.is_empty() {
            return Err(EngineError::Invalid(
                "a node needs at least one device".into(),
            ));
        }
        let mut lims = Vec::new();
        let mut labels = Vec::new();
        let mut gpus = Vec::new();
        for e in &engines {
            let d = e.device().device();
            let sm = d.sm_limits().ok_or_else(|| {
                EngineError::Invalid(format!(
                    "{}: the driver does not report the SM count, warp size and per-SM limits that placement across GPUs needs; serve one GPU (--device {})",
                    d.device(),
                    d.device()
                ))
            })?;
            let (_, total) = d
                .memory()
                .map_err(|e| EngineError::Invalid(format!("{}: {e}", d.device())))?;
            lims.push(reef_sched::place::DeviceLimits {
                sms: sm.sms,
                warp_size: sm.warp_size,
                max_warps_per_sm: sm.max_threads_per_sm / sm.warp_size.max(1),
                max_blocks_per_sm: sm.max_blocks_per_sm,
                max_threads_per_sm: sm.max_threads_per_sm,
                memory: total,
            });
            labels.push(d.device().to_string());
            gpus.push(format!("{} {}", d.device(), d.gpu_name()));
        }
        let name = format!(
            "reef-sched on a node of {} CUDA GPUs ({}) through cudarc, placement MGB Alg.3",
            engines.len(),
            gpus.join(", ")
        );
        let devs = engines
            .into_iter()
            .map(|e| Box::new(e) as Box<dyn Engine>)
            .collect();
        Self::with_devices(
            name,
            labels,
            devs,
            lims,
            "weights and one request's buffers per stream that runs it".into(),
        )
    }

    fn with_devices(
        name: String,
        labels: Vec<String>,
        devs: Vec<Box<dyn Engine>>,
        lims: Vec<reef_sched::place::DeviceLimits>,
        footprint: String,
    ) -> Result<Self, EngineError> {
        let placer = Placer::new(PlacePolicy::Alg3, lims)
            .map_err(|e| EngineError::Invalid(e.to_string()))?;
        Ok(Self {
            name,
            labels,
            devs,
            footprint,
            placer,
            models: HashMap::new(),
            next_model_task: MODEL_TASK_BASE,
            streams: HashMap::new(),
            tasks: HashMap::new(),
            counters: PlacementStats::default(),
            data: HashMap::new(),
        })
    }

    pub fn devices(&self) -> usize {
        self.devs.len()
    }

    /// The device holding `model`.
    pub fn model_device(&self, model: &str) -> Option<DeviceIdx> {
        self.models.get(model).map(|m| m.0)
    }

    /// The device a stream is bound to (after its first inference).
    pub fn stream_device(&self, stream: u64) -> Option<DeviceIdx> {
        self.streams
            .get(&stream)
            .and_then(|s| s.devs.first().copied())
    }

    /// Per-device state.
    fn status(&self) -> Vec<DeviceStatus> {
        (0..self.devs.len())
            .map(|d| {
                let v = self.placer.device(d).expect("device index in range");
                // A GPU's memory as its driver reports it; a simulated
                // device's as placement accounts it.
                let (used, total) = match self.devs[d].device_memory() {
                    Some((free, total)) => (total - free.min(total), total),
                    None => (v.memory_used, v.memory_total),
                };
                let mut models: Vec<String> = self
                    .models
                    .iter()
                    .filter(|(_, m)| m.0 == d)
                    .map(|(n, _)| n.clone())
                    .collect();
                models.sort();
                let on = |p: Priority| {
                    self.streams
                        .values()
                        .filter(|s| s.devs.contains(&d) && s.priority == p)
                        .count() as u32
                };
                DeviceStatus {
                    index: d,
                    preset: self.labels[d].clone(),
                    memory_total: total,
                    memory_used: used,
                    declared_tasks: v.tasks - models.len() as u32,
                    models,
                    rt_streams: on(Priority::Rt),
                    be_streams: on(Priority::Be),
                    tasks: self.tasks.values().filter(|&&t| t == d).count() as u32,
                    policy: self.devs[d].info().policy,
                }
            })
            .collect()
    }

    /// Tells the placer what each GPU's driver reports in use, so that
    /// memory held outside placement's reservations is not placed on.
    fn sync_driver_memory(&mut self) {
        for d in 0..self.devs.len() {
            if let Some((free, total)) = self.devs[d].device_memory() {
                self.placer
                    .set_unreserved_memory(d, total.saturating_sub(free));
            }
        }
    }

    /// Free memory per device as placement sees it (after
    /// [`Self::sync_driver_memory`]: the smaller of the placer's and the
    /// driver's figure).
    fn free(&self) -> Vec<u64> {
        (0..self.devs.len())
            .map(|d| {
                let v = self.placer.device(d).expect("device index in range");
                let placer = v.memory_total.saturating_sub(v.memory_used);
                match self.devs[d].device_memory() {
                    Some((free, _)) => placer.min(free),
                    None => placer,
                }
            })
            .collect()
    }

    fn refusal(&self, what: &str, memory: u64, pinned: Option<DeviceIdx>) -> EngineError {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let free: Vec<String> = self
            .free()
            .iter()
            .enumerate()
            .filter(|(d, _)| pinned.is_none_or(|p| p == *d))
            .map(|(d, &f)| format!("device {d}: {:.2} GiB free", gib(f)))
            .collect();
        EngineError::Busy(format!(
            "{what} needs {:.2} GiB of device memory ({} B: {}), more than {} ({}); unload a model or use a device with more memory",
            gib(memory),
            memory,
            self.footprint,
            if pinned.is_some() { "the pinned device has" } else { "any device has" },
            free.join(", ")
        ))
    }

    /// Loads a model, on `pin` if given, else where Algorithm 3 places it.
    pub fn add_model_on(
        &mut self,
        model: EngineModel,
        pin: Option<DeviceIdx>,
    ) -> Result<DeviceIdx, EngineError> {
        crate::engine::load_inline(self, model, pin).map(|d| d.expect("a node answers the device"))
    }

    /// [`Engine::begin_load`]: the model placed (on `pin` if given, else
    /// where Algorithm 3 places it) and its memory reserved there, with
    /// that device's long work for it.
    fn begin_model_load(
        &mut self,
        model: &EngineModel,
        pin: Option<DeviceIdx>,
    ) -> Result<LoadTicket, EngineError> {
        if self.models.contains_key(&model.name) {
            return Err(EngineError::Invalid(format!(
                "model {} is already loaded",
                model.name
            )));
        }
        let mut needs = model_needs(&model.model);
        // A GPU's engine knows what it will allocate (every device of a
        // node runs the same engine: the first one answers for all).
        if let Some(m) = self.devs[0].model_memory(model) {
            needs.memory = m?;
        }
        self.sync_driver_memory();
        let what = format!("model {}", model.name);
        let d = match pin {
            Some(p) if p >= self.devs.len() => {
                return Err(EngineError::Invalid(format!(
                    "device index {p} does not exist: this node has devices 0..{}",
                    self.devs.len() - 1
                )))
            }
            Some(p) => {
                if self.free()[p] < needs.memory {
                    self.counters.models_refused += 1;
                    return Err(self.refusal(&what, needs.memory, Some(p)));
                }
                p
            }
            None => {
                // Ask the placer on a copy: a model never waits for memory.
                let mut probe = self.placer.clone();
                match probe.task_begin(MODELS_JOB, TaskId(self.next_model_task), needs) {
                    Ok(Begin::Placed(d)) => d,
                    _ => {
                        self.counters.models_refused += 1;
                        return Err(self.refusal(&what, needs.memory, None));
                    }
                }
            }
        };
        let task = TaskId(self.next_model_task);
        self.next_model_task += 1;
        self.reserve_on(task, needs, d)?;
        match self.devs[d].begin_load(model, None) {
            Ok(t) => Ok(LoadTicket {
                work: t.work,
                device: Some(d),
                reservation: Some(task.0),
            }),
            Err(e) => {
                let _ = self.placer.task_end(task);
                Err(e)
            }
        }
    }

    /// [`Engine::finish_load`]: the model installed on the device its
    /// ticket placed it on.
    fn finish_model_load(
        &mut self,
        model: EngineModel,
        ticket: LoadTicket,
        part: Option<crate::engine::LoadedPart>,
    ) -> Result<DeviceIdx, EngineError> {
        let (Some(d), Some(task)) = (ticket.device, ticket.reservation) else {
            return Err(EngineError::Invalid(format!(
                "model {}: its load was not begun on this node",
                model.name
            )));
        };
        let task = TaskId(task);
        let name = model.name.clone();
        if self.models.contains_key(&name) {
            let _ = self.placer.task_end(task);
            return Err(EngineError::Invalid(format!(
                "model {name} is already loaded"
            )));
        }
        if let Err(e) = self.devs[d].finish_load(model, LoadTicket::default(), part) {
            let _ = self.placer.task_end(task);
            return Err(e);
        }
        self.models.insert(name, (d, task));
        self.counters.models_placed += 1;
        Ok(d)
    }

    /// Reserves `needs` for `task` on device `d` in the placer.
    fn reserve_on(
        &mut self,
        task: TaskId,
        needs: TaskNeeds,
        d: DeviceIdx,
    ) -> Result<(), EngineError> {
        match self.placer.task_begin_on(MODELS_JOB, task, needs, d) {
            Ok(true) => Ok(()),
            Ok(false) => Err(self.refusal(&format!("task {task:?}"), needs.memory, Some(d))),
            Err(e) => Err(EngineError::Invalid(e.to_string())),
        }
    }

    fn stream_devices(&self, stream: u64) -> Result<Vec<DeviceIdx>, EngineError> {
        self.streams
            .get(&stream)
            .map(|s| s.devs.clone())
            .ok_or_else(|| EngineError::NotFound(format!("stream {stream} is not open")))
    }

    fn bind_stream(&mut self, stream: u64, model: &str) -> Result<DeviceIdx, EngineError> {
        let rec = self
            .streams
            .get(&stream)
            .ok_or_else(|| EngineError::NotFound(format!("stream {stream} is not open")))?;
        let holder = self.models.get(model).map(|m| m.0).ok_or_else(|| {
            EngineError::NotFound(format!(
                "model {model} is not loaded on any device (reefctl models load {model})"
            ))
        })?;
        if rec.devs.contains(&holder) {
            return Ok(holder);
        }
        let priority = rec.priority;
        self.devs[holder].open_stream(stream, priority)?;
        self.streams
            .get_mut(&stream)
            .expect("checked")
            .devs
            .push(holder);
        self.counters.streams_bound += 1;
        Ok(holder)
    }
}

impl Engine for NodeEngine {
    fn info(&self) -> EngineInfo {
        let first = self.devs[0].info();
        EngineInfo {
            name: self.name.clone(),
            policy: first.policy,
            preemption_levels: first.preemption_levels,
        }
    }

    fn preemption_notes(&self) -> Vec<String> {
        self.devs[0].preemption_notes()
    }

    fn set_policy(&mut self, now: Nanos, policy: &str) -> Result<(), EngineError> {
        for d in &mut self.devs {
            d.set_policy(now, policy)?;
        }
        Ok(())
    }

    fn add_model(&mut self, model: EngineModel) -> Result<(), EngineError> {
        self.add_model_on(model, None).map(|_| ())
    }

    fn remove_model(&mut self, name: &str) {
        if let Some((d, t)) = self.models.remove(name) {
            self.devs[d].remove_model(name);
            let _ = self.placer.task_end(t);
            self.drain_placed();
        }
    }

    fn open_stream(&mut self, stream: u64, priority: Priority) -> Result<(), EngineError> {
        if self.streams.contains_key(&stream) {
            return Err(EngineError::Invalid(format!(
                "stream {stream} is already open"
            )));
        }
        self.streams.insert(
            stream,
            StreamRec {
                priority,
                devs: Vec::new(),
            },
        );
        Ok(())
    }

    fn close_stream(&mut self, now: Nanos, stream: u64, out: &mut Vec<EngineEvent>) -> Vec<u64> {
        let Some(rec) = self.streams.remove(&stream) else {
            return Vec::new();
        };
        let mut dropped = Vec::new();
        for d in rec.devs {
            dropped.extend(self.devs[d].close_stream(now, stream, out));
        }
        for t in &dropped {
            self.tasks.remove(t);
        }
        // Requests of other streams that finished while the devices caught
        // up (issue 25, D4: these were never forgotten, so a device's task
        // count, which placement reads, only grew).
        self.forget_done(out);
        dropped
    }

    fn withdraw(&mut self, task: u64) -> bool {
        let Some(&d) = self.tasks.get(&task) else {
            return false;
        };
        let gone = self.devs[d].withdraw(task);
        if gone {
            self.tasks.remove(&task);
        }
        gone
    }

    fn submit(
        &mut self,
        now: Nanos,
        task: u64,
        stream: u64,
        model: &str,
        out: &mut Vec<EngineEvent>,
    ) -> Result<(), EngineError> {
        let data = self.data.remove(&task);
        let d = self.bind_stream(stream, model)?;
        if let Some(data) = data {
            self.devs[d].set_data(task, data)?;
        }
        let r = self.devs[d].submit(now, task, stream, model, out);
        if r.is_ok() {
            self.tasks.insert(task, d);
        }
        self.forget_done(out);
        r
    }

    fn preempt(
        &mut self,
        now: Nanos,
        stream: u64,
        out: &mut Vec<EngineEvent>,
    ) -> Result<u64, EngineError> {
        let devs = self.stream_devices(stream)?;
        let mut n = 0;
        for d in devs {
            n += self.devs[d].preempt(now, stream, out)?;
        }
        self.forget_done(out);
        Ok(n)
    }

    fn resume(
        &mut self,
        now: Nanos,
        stream: u64,
        out: &mut Vec<EngineEvent>,
    ) -> Result<(), EngineError> {
        for d in self.stream_devices(stream)? {
            self.devs[d].resume(now, stream, out)?;
        }
        self.forget_done(out);
        Ok(())
    }

    fn advance(&mut self, now: Nanos, out: &mut Vec<EngineEvent>) {
        for d in &mut self.devs {
            d.advance(now, out);
        }
        self.forget_done(out);
    }

    fn next_event_time(&self) -> Option<Nanos> {
        self.devs.iter().filter_map(|d| d.next_event_time()).min()
    }

    fn queue_depths(&self, stream: u64) -> (usize, usize) {
        self.streams.get(&stream).map_or((0, 0), |s| {
            s.devs.iter().fold((0, 0), |(h, q), &d| {
                let (a, b) = self.devs[d].queue_depths(stream);
                (h + a, q + b)
            })
        })
    }

    fn set_data(
        &mut self,
        task: u64,
        data: std::sync::Arc<crate::tensors::RequestData>,
    ) -> Result<(), EngineError> {
        // Handed to the device the task is submitted to.
        self.data.insert(task, data);
        Ok(())
    }

    fn take_outputs(&mut self, task: u64) -> Option<crate::tensors::Outputs> {
        self.devs.iter_mut().find_map(|d| d.take_outputs(task))
    }

    fn residue(&self) -> (usize, usize) {
        let (mut tasks, mut held) = (self.tasks.len(), 0);
        for d in &self.devs {
            let (t, h) = d.residue();
            tasks += t;
            held += h;
        }
        (tasks, held)
    }

    fn task_progress(&self, task: u64) -> Option<TaskProgress> {
        self.tasks
            .get(&task)
            .and_then(|&d| self.devs[d].task_progress(task))
    }

    fn warm(&mut self) {
        for d in &mut self.devs {
            d.warm();
        }
    }

    fn padding(&self) -> Option<PaddingCounters> {
        let mut sum = PaddingCounters::default();
        let mut any = false;
        for p in self.devs.iter().filter_map(|d| d.padding()) {
            any = true;
            sum.rt_launches += p.rt_launches;
            sum.padded_launches += p.padded_launches;
            sum.be_blocks_padded += p.be_blocks_padded;
            sum.be_kernels_completed += p.be_kernels_completed;
        }
        any.then_some(sum)
    }

    fn add_model_on(
        &mut self,
        model: EngineModel,
        pin: Option<usize>,
    ) -> Result<Option<usize>, EngineError> {
        NodeEngine::add_model_on(self, model, pin).map(Some)
    }

    fn begin_load(
        &mut self,
        model: &EngineModel,
        pin: Option<usize>,
    ) -> Result<LoadTicket, EngineError> {
        self.begin_model_load(model, pin)
    }

    fn finish_load(
        &mut self,
        model: EngineModel,
        ticket: LoadTicket,
        part: Option<crate::engine::LoadedPart>,
    ) -> Result<Option<usize>, EngineError> {
        self.finish_model_load(model, ticket, part).map(Some)
    }

    fn abort_load(&mut self, ticket: LoadTicket) {
        if let Some(task) = ticket.reservation {
            let _ = self.placer.task_end(TaskId(task));
        }
    }

    fn standalone_ns(&self, name: &str) -> Option<u64> {
        self.devs[self.model_device(name)?].standalone_ns(name)
    }

    fn devices(&self) -> Vec<DeviceStatus> {
        self.status()
    }

    fn placement(&self) -> Option<PlacementStats> {
        Some(self.counters)
    }

    /// `task_begin` (CASE/MGB §III-A, §IV): places a declared task; answers
    /// with its device, or `None` while it waits for memory.
    fn task_begin(
        &mut self,
        job: u64,
        task: u64,
        needs: TaskNeeds,
    ) -> Result<Option<usize>, EngineError> {
        if task >= MODEL_TASK_BASE || job == MODELS_JOB.0 {
            return Err(EngineError::Invalid(format!(
                "task {task} of job {job}: ids are reserved; use a task id below 2^62 and a job id other than 0"
            )));
        }
        self.sync_driver_memory();
        match self.placer.task_begin(JobId(job), TaskId(task), needs) {
            Ok(Begin::Placed(d)) => {
                self.counters.tasks_placed += 1;
                Ok(Some(d))
            }
            Ok(Begin::Waiting) => {
                self.counters.tasks_waited += 1;
                Ok(None)
            }
            Err(e) => {
                self.counters.tasks_refused += 1;
                Err(EngineError::Invalid(e.to_string()))
            }
        }
    }

    fn task_device(&self, task: u64) -> Option<usize> {
        self.placer.device_of(TaskId(task))
    }

    /// `task_end`: releases exactly what `task_begin` reserved.
    fn task_end(&mut self, task: u64) -> Result<(), EngineError> {
        if task >= MODEL_TASK_BASE {
            return Err(EngineError::NotFound(format!("task {task} is not known")));
        }
        self.placer
            .task_end(TaskId(task))
            .map_err(|e| EngineError::NotFound(e.to_string()))?;
        self.drain_placed();
        Ok(())
    }

    fn job_end(&mut self, job: u64) {
        if job != MODELS_JOB.0 {
            self.placer.job_end(JobId(job));
            self.drain_placed();
        }
    }
}

impl NodeEngine {
    /// Tasks placed after waiting are found by `task_device`; the placer's
    /// queue of them is drained here so it does not grow.
    fn drain_placed(&mut self) {
        while self.placer.poll_placed().is_some() {
            self.counters.tasks_placed += 1;
        }
    }

    fn forget_done(&mut self, out: &[EngineEvent]) {
        for e in out {
            if let EngineEvent::TaskDone { task, .. }
            | EngineEvent::TaskRejected { task, .. }
            | EngineEvent::TaskFailed { task, .. } = e
            {
                self.tasks.remove(task);
            }
        }
    }
}

#[cfg(test)]
mod tests;

//! The live engine: the sans-IO scheduler core (reef-sched, REEF §3.1 task
//! queues and real-time/normal modes, §4 reset-based preemption) driving the
//! block-level simulated GPU (reef-sim), paced to the wall clock by the
//! runtime. This is the same pairing the virtual-time benchmark runs
//! (reef-bench's DISB runner), through the same interpreter and event-loop
//! step (reef-exec's `Driver`: what each scheduler action means on the
//! device, device events before the host's issues at each instant, one
//! error policy); here `now` comes from the wall clock, and the simulator
//! never runs ahead of it. On `gv100`/`h100` the daemon, like the
//! benchmark, runs REEFnv's per-stream cap (`reef_exec::reefnv_runtime`),
//! and REEF's policies give each stream its own hardware queue
//! (`reef_exec::own_device_queues`).
//!
//! Under `reef` and `reef-dkp-mv` the scheduler is reef-sched's
//! `PaddingScheduler` (REEF §5: dynamic kernel padding) and its padded
//! launches (§5.1, Fig. 12: the RT kernel's blocks on the CUs it needs, the
//! chosen BE blocks on the rest, one launch) are executed by `PadExec`; the
//! parts' device events reach the scheduler as one event of the RT kernel.
//! Each BE part carries its own task's buffers, so value tracking covers
//! padded work, and the rest of a partly padded kernel (`DkpAction::Rest`)
//! is launched on the task's own stream.
//!
//! Under `fikit*` (FIKIT, fikit.txt §3.2) the scheduler is reef-sched's
//! FIKIT policy with the models' kernel IDs and the profiles kept so far
//! (`fikit_store`: `<model>.fikit.json`, written when a model's measuring
//! stage ends); a BE scheduler client takes the priority level of the
//! daemon stream bound to it. With `host_gap_us` the clients' framework is
//! host-paced as in reef-bench's runner (kernel i+1 one host gap after
//! kernel i was transmitted), which leaves the gaps FIKIT fills.
//!
//! Under `aker`, `baymax` and `tacker` (Aker §8.3, §9.3) the scheduler is
//! reef-sched's `AkerScheduler` with a predictor profiled on a scratch
//! simulated device at each build (reef-exec's `SimPredictor`); every
//! launch goes to the first scheduler stream, fused launches (an LC kernel
//! with a block range of a BE kernel on the same CUs) are executed by
//! reef-exec's `FuseExec` with both components' buffers, and the rest of a
//! split BE kernel is launched with its remaining blocks. An RT request's
//! QoS target comes with it (`infer --qos-ms`), else the manager's default
//! (3 × the model's predicted stand-alone latency).
//!
//! Mapping daemon clients onto the scheduler. The core is built for a fixed
//! set of clients, each bound to one model and one class (REEF §3.1: one
//! real-time task queue, one best-effort queue per BE client). The engine
//! therefore gives every loaded model one RT scheduler client (REEF's layout
//! puts every RT client on the one RT stream anyway, served one request at a
//! time) and `be_streams_per_model` BE scheduler clients, each with its own
//! stream (host queue + capped device queue, §4.1 Fig. 7). A daemon BE stream
//! takes a free BE client of a model the first time it infers that model and
//! keeps it until it closes. Each daemon stream has at most one request inside
//! the scheduler; the rest wait in the stream's own FIFO here, so a client that
//! dies leaves at most one request to finish on the device, and its queued
//! ones are dropped at once.
//!
//! Loading or unloading a model, or switching the policy, rebuilds the core
//! and a fresh simulator (both are built for a fixed configuration). The
//! rebuild waits until no request is inside the scheduler: new requests wait
//! in their stream FIFOs meanwhile, so the stall is bounded by the requests
//! already running.
//!
//! Value tracking (DESIGN.md, simulator): every kernel launch carries the
//! buffers it reads and writes. Each daemon stream has its own buffer
//! namespace (reused once the stream and its last request are gone), reset
//! to fresh versions when one of its requests enters the scheduler; when the
//! request finishes, its output versions are compared with the same request
//! run once, unpreempted (`outputs_verified`). A kill leaves corrupted
//! versions behind, so a wrong restore point shows up as a mismatch.
//!
//! The control path is measured to the instant a launch is issued to the
//! simulated device queue; the simulator's computation of what the GPU does
//! next (fetch, block placement) is device work and is not counted.

use crate::engine::{
    Engine, EngineError, EngineEvent, EngineInfo, EngineModel, Nanos, PaddingCounters, TaskProgress,
};
use crate::protocol::{Priority, TaskState};
use reef_exec::{Device, Driver, LaunchKind, ModelShapes, Outcome, RunSched, Setup, Work};
use reef_sched::{Class, ClientId, ClientSpec, Event, ModelId, ModelInfo, RequestId, StreamId};
use reef_sim::{BufferId, DeviceSpec, KernelShape, ValueTracker};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

mod buffers;
mod clients;
mod device;
mod load;
mod outcomes;
mod rebuild;
#[cfg(test)]
mod tests;
mod trace;

use buffers::{buffer, buffers_of, Expected};
use clients::Slot;
pub use device::EngineDevice;
use rebuild::add_aker;

/// Settings of a [`SchedEngine`].
#[derive(Debug, Clone)]
pub struct SchedSettings {
    /// Simulator preset (`mi50`, `gv100`, `h100`).
    pub preset: String,
    pub policy: String,
    /// Device-queue capacity of preemptible streams (REEF §4.2: 4 on MI50).
    pub dq_capacity: usize,
    /// Best-effort scheduler clients (streams) per loaded model.
    pub be_streams_per_model: usize,
    /// Seed of the simulator.
    pub seed: u64,
    /// FIKIT's parameters (policy `fikit*`).
    pub fikit: reef_sched::fikit::FikitConfig,
    /// Where FIKIT profiles are kept (default: beside each model).
    pub fikit_profile_dir: Option<std::path::PathBuf>,
    /// Host time per kernel launch of the clients' framework, ns (`None`:
    /// back to back). Kernel 0 of a request is issued one gap after it
    /// enters the scheduler, kernel i+1 one gap after kernel i was
    /// transmitted (the same model as reef-bench's runner).
    pub host_gap_ns: Option<u64>,
}

struct Prepared {
    name: String,
    model: Arc<reef_model::Model>,
    shapes: Vec<Arc<KernelShape>>,
    idempotence: Option<reef_model::idempotence::IdempotenceMetadata>,
    /// Per value-tracking namespace, the outputs of one unpreempted run of
    /// the model: what every request is checked against. Computed once per
    /// namespace (replaying the model costs ~100 us for resnet152, which
    /// must not be paid under the runtime's lock at every completion).
    expected: HashMap<(u32, usize), Expected>,
}

impl ModelShapes for Prepared {
    fn name(&self) -> &str {
        &self.name
    }
    fn model(&self) -> &reef_model::Model {
        &self.model
    }
    fn shapes(&self) -> &[Arc<KernelShape>] {
        &self.shapes
    }
}

/// The scheduler and device of one configuration.
struct Build<D: EngineDevice> {
    /// The scheduler, its executors and the simulated device, driven by
    /// reef-exec's interpreter (the benchmark's runner takes the same steps).
    drv: Driver<D>,
    /// Engine time of device time 0.
    base: Nanos,
    slots: Vec<Slot>,
    /// Index into `slots` of each model's RT client.
    rt_slot: Vec<usize>,
    preemptions_seen: usize,
}

/// The engine's tasks as the interpreter sees them.
struct View<'a> {
    tasks: &'a HashMap<u64, TaskRec>,
    models: &'a [Prepared],
    slots: &'a [Slot],
}

impl Work for View<'_> {
    fn model_of(&self, req: RequestId) -> Option<usize> {
        self.tasks.get(&req.0).map(|r| self.slots[r.slot].model)
    }
    fn buffers(&self, req: RequestId, k: usize) -> reef_exec::Buffers {
        buffers_of(self.tasks, self.models, self.slots, req.0, k)
    }
}

struct DStream {
    priority: Priority,
    /// Tasks waiting to enter the scheduler: (task, model index).
    queue: VecDeque<(u64, String)>,
    /// The task inside the scheduler, if any.
    inflight: Option<u64>,
    /// BE scheduler client per model name.
    be_slots: HashMap<String, usize>,
    /// Scheduler streams this daemon stream has used.
    sched_streams: BTreeSet<u32>,
    preempted: bool,
    /// Value-tracking buffer namespace.
    ns: u32,
}

struct TaskRec {
    /// Why the device failed the task (a launch it refused).
    failed: Option<String>,
    dstream: Option<u64>,
    slot: usize,
    ns: u32,
    launched: bool,
    next_kernel: usize,
    kernels: usize,
}

/// See the module documentation.
pub struct SchedEngine<D: EngineDevice = crate::device::sim::SimDevice> {
    settings: SchedSettings,
    spec: DeviceSpec,
    models: Vec<Prepared>,
    build: Build<D>,
    dstreams: BTreeMap<u64, DStream>,
    tasks: HashMap<u64, TaskRec>,
    rebuild_pending: bool,
    /// Padding counters of the builds replaced so far.
    padding_before: PaddingCounters,
    /// Outcomes of the interpreter being taken in (kept for its capacity).
    outcomes: Vec<Outcome>,
    free_ns: Vec<u32>,
    next_ns: u32,
    /// A request finished during the current catch-up: the next request
    /// queued on its daemon stream is forwarded at that instant, not at the
    /// end of the catch-up (which, with a pacer that catches up every tick,
    /// would delay it by up to a tick of virtual time).
    freed: bool,
    /// FIKIT profiles known (loaded or measured), by task key: they
    /// survive rebuilds even where they cannot be written.
    fikit_profiles: HashMap<String, reef_sched::fikit::profile::Profile>,
    /// Profiles the current build had built when last saved.
    fikit_saved: u64,
    /// QoS targets (ns) of tasks not yet in the scheduler (`--qos-ms`).
    qos: HashMap<u64, u64>,
    /// Data of tasks not yet in the scheduler ([`Engine::set_data`]),
    /// handed to the device when they enter it.
    data: HashMap<u64, Arc<crate::tensors::RequestData>>,
    /// Outputs of finished tasks, until the runtime takes them.
    outputs: HashMap<u64, crate::tensors::Outputs>,
    /// The Aker managers' figures of the builds replaced so far.
    aker_before: reef_sched::aker::AkerStats,
    /// The Aker predictor of the current build uses the device's own
    /// kernel times ([`EngineDevice::kernel_ns`]).
    aker_measured: bool,
    /// Each loaded model's kernels' stand-alone times profiled on the
    /// simulated preset for the Aker predictor, kept across rebuilds so a
    /// rebuild (under the runtime's lock) profiles only models it has not
    /// seen (issue 25 item 2).
    aker_times: HashMap<String, Vec<f64>>,
}

/// Whether the engine runs `policy` (reef-sched's names and the Aker
/// managers').
fn check_policy(policy: &str) -> Result<(), EngineError> {
    if reef_sched::aker::Manager::of_name(policy).is_some() {
        return Ok(());
    }
    reef_sched::policy_by_name(policy)
        .map(|_| ())
        .map_err(|e| EngineError::Invalid(e.to_string()))
}

impl<D: EngineDevice> SchedEngine<D> {
    /// The device the engine runs on.
    pub fn device(&self) -> &D {
        &self.build.drv.dev
    }

    /// The engine on device `dev`, whose scheduler sees it as `spec` (its
    /// preemption levels, launch costs and limits).
    pub fn on_device(
        settings: SchedSettings,
        spec: DeviceSpec,
        dev: D,
    ) -> Result<SchedEngine<D>, EngineError> {
        check_policy(&settings.policy)?;
        if settings.be_streams_per_model == 0 || settings.dq_capacity == 0 {
            return Err(EngineError::Invalid(
                "scheduler.be_streams_per_model and scheduler.device_queue_capacity must be at least 1"
                    .into(),
            ));
        }
        let (setup, slots, rt_slot) = Self::layout(&settings, &spec, &[], &HashMap::new());
        let drv = Driver::with_device(setup, dev)
            .map_err(|e| EngineError::Invalid(format!("scheduler: {e:#}")))?;
        let build = Build {
            drv,
            base: 0,
            slots,
            rt_slot,
            preemptions_seen: 0,
        };
        Ok(SchedEngine {
            settings,
            spec,
            models: Vec::new(),
            build,
            dstreams: BTreeMap::new(),
            tasks: HashMap::new(),
            rebuild_pending: false,
            padding_before: PaddingCounters::default(),
            outcomes: Vec::new(),
            free_ns: Vec::new(),
            next_ns: 0,
            freed: false,
            fikit_profiles: HashMap::new(),
            fikit_saved: 0,
            qos: HashMap::new(),
            data: HashMap::new(),
            outputs: HashMap::new(),
            aker_before: Default::default(),
            aker_measured: false,
            aker_times: HashMap::new(),
        })
    }

    fn sim_now(&self, now: Nanos) -> u64 {
        now.saturating_sub(self.build.base)
    }

    fn idle(&self) -> bool {
        self.build.slots.iter().all(|s| s.inflight == 0)
    }

    fn model_index(&self, name: &str) -> Option<usize> {
        self.models.iter().position(|m| m.name == name)
    }
}

impl<D: EngineDevice + 'static> Engine for SchedEngine<D> {
    fn info(&self) -> EngineInfo {
        let mut levels: Vec<u8> = self.spec.levels().into_iter().map(|l| l as u8).collect();
        levels.sort();
        EngineInfo {
            name: format!(
                "reef-sched on {} (wall clock)",
                self.build.drv.dev.describe()
            ),
            policy: self.settings.policy.clone(),
            preemption_levels: levels,
        }
    }

    fn preemption_notes(&self) -> Vec<String> {
        self.build.drv.dev.notes()
    }

    fn model_memory(&self, m: &EngineModel) -> Option<Result<u64, EngineError>> {
        self.build.drv.dev.model_memory(m)
    }

    fn device_memory(&self) -> Option<(u64, u64)> {
        self.build.drv.dev.device_memory()
    }

    fn standalone_ns(&self, name: &str) -> Option<u64> {
        self.build.drv.dev.standalone_ns(name)
    }

    fn set_policy(&mut self, now: Nanos, policy: &str) -> Result<(), EngineError> {
        check_policy(policy)?;
        // `reef` without block placement is REEF's preemption without
        // padding, as at start (`device::cuda::engine::gpu_policy`).
        let policy = match policy {
            "reef" if !self.build.drv.dev.places_blocks() => "reef-nodkp",
            p if !self.build.drv.dev.places_blocks() => crate::device::cuda::engine::gpu_policy(p),
            p => p,
        };
        if reef_exec::places_blocks(policy) && !self.build.drv.dev.places_blocks() {
            return Err(EngineError::Unsupported(format!(
                "policy {policy} places blocks on chosen compute units (padded or fused launches), which {} cannot do; use a policy without padding (reef-nodkp)",
                self.build.drv.dev.describe()
            )));
        }
        self.settings.policy = policy.to_string();
        self.rebuild_pending = true;
        self.maybe_rebuild(now);
        Ok(())
    }

    fn add_model(&mut self, model: EngineModel) -> Result<(), EngineError> {
        crate::engine::load_inline(self, model, None).map(|_| ())
    }

    fn begin_load(
        &mut self,
        model: &EngineModel,
        pin: Option<usize>,
    ) -> Result<crate::engine::LoadTicket, EngineError> {
        self.begin_model_load(model, pin)
    }

    fn finish_load(
        &mut self,
        model: EngineModel,
        _ticket: crate::engine::LoadTicket,
        part: Option<crate::engine::LoadedPart>,
    ) -> Result<Option<usize>, EngineError> {
        self.install_model(model, part).map(|()| None)
    }

    fn remove_model(&mut self, name: &str) {
        self.models.retain(|m| m.name != name);
        self.build.drv.dev.unload(name);
        self.rebuild_pending = true;
        let now = self.build.base + self.build.drv.dev.now();
        self.maybe_rebuild(now);
    }

    fn open_stream(&mut self, stream: u64, priority: Priority) -> Result<(), EngineError> {
        let ns = self.free_ns.pop().unwrap_or_else(|| {
            self.next_ns += 1;
            self.next_ns - 1
        });
        self.dstreams.insert(
            stream,
            DStream {
                priority,
                queue: VecDeque::new(),
                inflight: None,
                be_slots: HashMap::new(),
                sched_streams: BTreeSet::new(),
                preempted: false,
                ns,
            },
        );
        Ok(())
    }

    fn close_stream(&mut self, now: Nanos, stream: u64, out: &mut Vec<EngineEvent>) -> Vec<u64> {
        self.run_device(now, out);
        let Some(d) = self.dstreams.remove(&stream) else {
            return Vec::new();
        };
        let mut dropped: Vec<u64> = d.queue.iter().map(|(t, _)| *t).collect();
        for t in &dropped {
            self.data.remove(t);
        }
        if let Some(t) = d.inflight {
            // The request inside the scheduler cannot be withdrawn from it:
            // it finishes as an orphan and its client slot frees then.
            if let Some(rec) = self.tasks.get_mut(&t) {
                rec.dstream = None;
            }
            dropped.push(t);
        } else {
            self.free_ns.push(d.ns);
        }
        for s in d.be_slots.values() {
            self.build.slots[*s].owner = None;
        }
        if d.preempted {
            // Let the orphan finish so that its client and stream free up.
            let t = self.build.drv.dev.now();
            for s in d.sched_streams {
                self.build.drv.sched.handle(
                    t,
                    Event::ResumeCommand {
                        stream: StreamId(s),
                    },
                );
            }
            self.apply_actions(out);
        }
        self.forward(out);
        dropped
    }

    fn withdraw(&mut self, task: u64) -> bool {
        for d in self.dstreams.values_mut() {
            if let Some(i) = d.queue.iter().position(|(t, _)| *t == task) {
                d.queue.remove(i);
                return true;
            }
        }
        false
    }

    fn submit(
        &mut self,
        now: Nanos,
        task: u64,
        stream: u64,
        model: &str,
        out: &mut Vec<EngineEvent>,
    ) -> Result<(), EngineError> {
        if self.model_index(model).is_none() {
            self.data.remove(&task);
            return Err(EngineError::NotFound(format!(
                "model {model} is not loaded"
            )));
        }
        if !self.dstreams.contains_key(&stream) {
            self.data.remove(&task);
            return Err(EngineError::NotFound(format!("no stream {stream}")));
        }
        // Catch the device up to `now` before the task joins its stream's
        // queue: events replayed late (the daemon descheduled, the device
        // behind the wall clock) free slots at their own past instants, and
        // a task queued before the replay would be started there, before it
        // arrived (it was: latencies of 0 us under load).
        self.run_device(now, out);
        if let Some(d) = self.dstreams.get_mut(&stream) {
            d.queue.push_back((task, model.to_string()));
        }
        self.forward(out);
        Ok(())
    }

    fn preempt(
        &mut self,
        now: Nanos,
        stream: u64,
        out: &mut Vec<EngineEvent>,
    ) -> Result<u64, EngineError> {
        self.run_device(now, out);
        let Some(d) = self.dstreams.get_mut(&stream) else {
            return Err(EngineError::NotFound(format!("no stream {stream}")));
        };
        d.preempted = true;
        let streams = self.sched_streams_of(stream);
        let t = self.build.drv.dev.now();
        let mut kernels = 0u64;
        for s in streams {
            kernels += self
                .build
                .drv
                .sched
                .scheduler()
                .core()
                .outstanding(StreamId(s)) as u64;
            self.build.drv.sched.handle(
                t,
                Event::PreemptCommand {
                    stream: StreamId(s),
                },
            );
            self.apply_actions(out);
        }
        Ok(kernels)
    }

    fn resume(
        &mut self,
        now: Nanos,
        stream: u64,
        out: &mut Vec<EngineEvent>,
    ) -> Result<(), EngineError> {
        self.run_device(now, out);
        let Some(d) = self.dstreams.get_mut(&stream) else {
            return Err(EngineError::NotFound(format!("no stream {stream}")));
        };
        d.preempted = false;
        let streams = self.sched_streams_of(stream);
        let t = self.build.drv.dev.now();
        for s in streams {
            self.build.drv.sched.handle(
                t,
                Event::ResumeCommand {
                    stream: StreamId(s),
                },
            );
            self.apply_actions(out);
        }
        self.forward(out);
        Ok(())
    }

    fn advance(&mut self, now: Nanos, out: &mut Vec<EngineEvent>) {
        self.run_device(now, out);
        self.save_fikit_profiles();
    }

    fn warm(&mut self) {
        if !self.rebuild_pending {
            self.build.drv.sched.rehearse();
        }
    }

    fn next_event_time(&self) -> Option<Nanos> {
        self.build.drv.next_time().map(|t| t + self.build.base)
    }

    fn queue_depths(&self, stream: u64) -> (usize, usize) {
        let Some(d) = self.dstreams.get(&stream) else {
            return (0, 0);
        };
        let mut host = 0usize;
        for (_, m) in &d.queue {
            if let Some(mi) = self.model_index(m) {
                host += self.models[mi].shapes.len();
            }
        }
        let mut device = 0usize;
        for s in &d.sched_streams {
            if let Some(ss) = self.build.drv.device_stream(StreamId(*s)) {
                device += self.build.drv.dev.queue_len(ss);
            }
        }
        if let Some(rec) = d.inflight.and_then(|t| self.tasks.get(&t)) {
            host += rec.kernels.saturating_sub(rec.next_kernel);
        }
        (host, device)
    }

    fn set_qos(&mut self, task: u64, qos_ns: Option<u64>) {
        match qos_ns {
            Some(q) => self.qos.insert(task, q),
            None => self.qos.remove(&task),
        };
    }

    fn set_data(
        &mut self,
        task: u64,
        data: Arc<crate::tensors::RequestData>,
    ) -> Result<(), EngineError> {
        self.build
            .drv
            .dev
            .data_path()
            .map_err(EngineError::Unsupported)?;
        self.data.insert(task, data);
        Ok(())
    }

    fn take_outputs(&mut self, task: u64) -> Option<crate::tensors::Outputs> {
        self.outputs.remove(&task)
    }

    fn aker(&self) -> Option<crate::protocol::AkerStats> {
        let cur = self.build.drv.sched.aker_stats();
        if cur.is_none() && self.aker_before == Default::default() {
            return None;
        }
        let mut a = self.aker_before;
        add_aker(&mut a, cur.unwrap_or_default());
        Some(crate::protocol::AkerStats {
            lc_launches: a.lc_launches,
            fused_launches: a.fused_launches,
            be_blocks_fused: a.be_blocks_fused,
            be_direct_in_headroom: a.be_direct_in_headroom,
            be_launches_idle: a.be_launches_idle,
            rest_launches: a.rest_launches,
            qos_met: a.qos_met,
            qos_missed: a.qos_missed,
            predictions_measured: self.aker_measured,
        })
    }

    fn fikit(&self) -> Option<crate::protocol::FikitStats> {
        let f = self.fikit_policy()?;
        let s = f.stats();
        Some(crate::protocol::FikitStats {
            gaps_seen: s.gaps_seen,
            gaps_below_epsilon: s.gaps_below_epsilon,
            gaps_filled: s.gaps_filled,
            fill_kernels: s.fill_kernels,
            early_stops: s.early_stops,
            overruns: s.overruns,
            overrun_us: s.overrun_ns as f64 / 1e3,
            measured_runs: s.measured_runs,
            profiles_built: s.profiles_built,
            profiles_missing_or_stale: s.profiles_missing_or_stale,
            measuring: f
                .measuring()
                .into_iter()
                .map(|m| crate::protocol::MeasuringTask {
                    task: m.task_key,
                    runs_done: m.runs_done,
                    runs: m.runs,
                })
                .collect(),
        })
    }

    fn padding(&self) -> Option<PaddingCounters> {
        // Totals since start, whatever the policy now: a counter never goes
        // back when the operator switches to a policy that does not pad.
        Some(self.padding_now())
    }

    fn code_reader(&self) -> Option<crate::engine::CodeReader> {
        self.build.drv.dev.code_reader()
    }

    fn residue(&self) -> (usize, usize) {
        let held = self
            .build
            .slots
            .iter()
            .filter(|s| s.owner.is_some() || s.inflight > 0)
            .count();
        (self.tasks.len(), held)
    }

    fn task_progress(&self, task: u64) -> Option<TaskProgress> {
        if let Some(rec) = self.tasks.get(&task) {
            let paused = rec
                .dstream
                .and_then(|d| self.dstreams.get(&d))
                .is_some_and(|d| d.preempted);
            return Some(TaskProgress {
                state: if paused {
                    TaskState::Preempted
                } else if rec.launched {
                    TaskState::Running
                } else {
                    TaskState::Queued
                },
                next_kernel: rec.next_kernel,
                kernels: rec.kernels,
            });
        }
        for d in self.dstreams.values() {
            if let Some((_, m)) = d.queue.iter().find(|(t, _)| *t == task) {
                return Some(TaskProgress {
                    state: TaskState::Queued,
                    next_kernel: 0,
                    kernels: self
                        .model_index(m)
                        .map_or(0, |mi| self.models[mi].shapes.len()),
                });
            }
        }
        None
    }
}

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

use super::{
    Engine, EngineError, EngineEvent, EngineInfo, EngineModel, Nanos, PaddingCounters, TaskProgress,
};
use crate::protocol::{Priority, TaskState};
use reef_exec::{Device, Driver, LaunchKind, ModelShapes, Outcome, RunSched, Setup, Work};
use reef_sched::{Class, ClientId, ClientSpec, Event, ModelId, ModelInfo, RequestId, StreamId};
use reef_sim::{BufferId, DeviceSpec, KernelShape, Sim, SimConfig, ValueTracker};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

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
    expected: HashMap<u32, Arc<[(BufferId, u64)]>>,
}

impl Prepared {
    /// The value every output buffer of a request in namespace `ns` has
    /// after one unpreempted run of the model.
    fn expected_outputs(&mut self, ns: u32) -> Arc<[(BufferId, u64)]> {
        if let Some(e) = self.expected.get(&ns) {
            return e.clone();
        }
        let mut reference = ValueTracker::new();
        let mut outs = BTreeSet::new();
        reef_exec::replay_unpreempted(&mut reference, self, |x| buffer(ns, x), &mut outs);
        let e: Arc<[(BufferId, u64)]> = outs.into_iter().map(|b| (b, reference.get(b))).collect();
        self.expected.insert(ns, e.clone());
        e
    }
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

/// One scheduler client.
struct Slot {
    model: usize,
    class: Class,
    /// The daemon stream holding this BE client.
    owner: Option<u64>,
    /// Requests of this client inside the scheduler.
    inflight: usize,
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
pub struct SchedEngine<D: EngineDevice = Sim> {
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
    /// The Aker managers' figures of the builds replaced so far.
    aker_before: reef_sched::aker::AkerStats,
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

fn add_aker(a: &mut reef_sched::aker::AkerStats, b: reef_sched::aker::AkerStats) {
    a.lc_launches += b.lc_launches;
    a.fused_launches += b.fused_launches;
    a.be_blocks_fused += b.be_blocks_fused;
    a.be_direct_in_headroom += b.be_direct_in_headroom;
    a.be_launches_idle += b.be_launches_idle;
    a.rest_launches += b.rest_launches;
    a.qos_met += b.qos_met;
    a.qos_missed += b.qos_missed;
    a.beyond_headroom += b.beyond_headroom;
}

/// The reads and writes of kernel `k` of task `task`, in its stream's
/// value-tracking namespace (empty for an unknown task).
fn buffers_of(
    tasks: &HashMap<u64, TaskRec>,
    models: &[Prepared],
    slots: &[Slot],
    task: u64,
    k: usize,
) -> (Vec<BufferId>, Vec<BufferId>) {
    let Some(rec) = tasks.get(&task) else {
        return (Vec::new(), Vec::new());
    };
    let kern = &models[slots[rec.slot].model].model.kernels[k];
    (
        kern.reads.iter().map(|&x| buffer(rec.ns, x)).collect(),
        kern.writes.iter().map(|&x| buffer(rec.ns, x)).collect(),
    )
}

/// A buffer of value-tracking namespace `ns` (one per daemon stream, reused
/// after the stream and its last request are gone).
fn buffer(ns: u32, storage: usize) -> BufferId {
    BufferId(((ns as u64 + 1) << 32) | storage as u64)
}

/// What the engine needs of its device beyond reef-exec's interface.
pub trait EngineDevice: Device + Send {
    /// What executes the work, for `status` (e.g. `reef-sim mi50`).
    fn describe(&self) -> String;
    /// Loads model `m`'s code on the device (a GPU: its kernels and weights,
    /// refused with the figures when it does not fit); the simulator runs
    /// the schedule's shapes and needs nothing.
    fn load(&mut self, _m: &EngineModel) -> Result<(), EngineError> {
        Ok(())
    }
    /// Unloads model `name` (its requests have finished).
    fn unload(&mut self, _name: &str) {}
    /// Why preemption levels are missing (`status`).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// Device memory model `m` takes once loaded and run by the engine's
    /// streams (placement across a GPU node); `None`: the footprint the
    /// model declares.
    fn model_memory(&self, _m: &EngineModel) -> Option<Result<u64, EngineError>> {
        None
    }
    /// (free, total) memory as the driver reports it (`None`: simulated).
    fn device_memory(&self) -> Option<(u64, u64)> {
        None
    }
    /// Model `name`'s stand-alone latency measured on the device when it
    /// was loaded (ns); `None`: not measured (the simulator: the model's
    /// profile, if any, gives it).
    fn standalone_ns(&self, _name: &str) -> Option<u64> {
        None
    }
}

impl EngineDevice for Sim {
    fn describe(&self) -> String {
        format!("reef-sim {}", self.spec().name)
    }
}

impl SchedEngine {
    /// The engine on a simulated device of preset `settings.preset`.
    pub fn new(settings: SchedSettings) -> Result<SchedEngine, EngineError> {
        let spec = DeviceSpec::preset(&settings.preset)
            .map_err(|e| EngineError::Invalid(format!("device sim:{}: {e}", settings.preset)))?;
        let sim = Sim::new(
            spec.clone(),
            SimConfig {
                seed: settings.seed,
                ..SimConfig::default()
            },
        );
        SchedEngine::on_device(settings, spec, sim)
    }
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
            aker_before: Default::default(),
        })
    }

    /// The scheduler's clients for `models` (one RT client per model and
    /// `be_streams_per_model` BE clients, see the module doc) and the
    /// driver setup that runs them.
    fn layout<'a>(
        settings: &'a SchedSettings,
        spec: &'a DeviceSpec,
        models: &'a [Prepared],
        known: &HashMap<String, reef_sched::fikit::profile::Profile>,
    ) -> (Setup<'a, Prepared>, Vec<Slot>, Vec<usize>) {
        let infos: Vec<ModelInfo> = models
            .iter()
            .map(|m| ModelInfo {
                name: m.name.clone(),
                kernels: m.shapes.len() as u32,
                idempotence: m.idempotence.clone(),
            })
            .collect();
        let mut specs = Vec::new();
        let mut slots = Vec::new();
        let mut rt_slot = Vec::new();
        for (mi, m) in models.iter().enumerate() {
            rt_slot.push(slots.len());
            specs.push(ClientSpec {
                name: format!("{}-rt", m.name),
                model: ModelId(mi as u32),
                class: Class::RealTime,
            });
            slots.push(Slot {
                model: mi,
                class: Class::RealTime,
                owner: None,
                inflight: 0,
            });
            for b in 0..settings.be_streams_per_model {
                specs.push(ClientSpec {
                    name: format!("{}-be{b}", m.name),
                    model: ModelId(mi as u32),
                    class: Class::BestEffort,
                });
                slots.push(Slot {
                    model: mi,
                    class: Class::BestEffort,
                    owner: None,
                    inflight: 0,
                });
            }
        }
        // FIKIT starts from the profiles kept so far (in memory, else on
        // disk).
        let fikit_profiles = if settings.policy.starts_with("fikit") {
            models
                .iter()
                .filter_map(|m| {
                    known.get(&m.name).cloned().or_else(|| {
                        super::fikit_store::load(&super::fikit_store::path(
                            settings.fikit_profile_dir.as_deref(),
                            &m.name,
                            &m.model.path,
                        ))
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        let setup = Setup {
            spec,
            models,
            infos,
            clients: specs,
            policy: &settings.policy,
            dq_capacity: settings.dq_capacity,
            priorities: Vec::new(),
            seed: settings.seed,
            host_gap_ns: settings.host_gap_ns,
            fikit: settings.fikit.clone(),
            fikit_profiles,
            aker: reef_sched::aker::AkerConfig::default(),
            aker_profiles: None,
        };
        (setup, slots, rt_slot)
    }

    fn sim_now(&self, now: Nanos) -> u64 {
        now.saturating_sub(self.build.base)
    }

    fn idle(&self) -> bool {
        self.build.slots.iter().all(|s| s.inflight == 0)
    }

    /// Rebuilds the core and simulator when asked and nothing is inside.
    fn maybe_rebuild(&mut self, now: Nanos) {
        if !self.rebuild_pending || !self.idle() {
            return;
        }
        self.save_fikit_profiles();
        let padding = self.padding_now();
        let aker = self.build.drv.sched.aker_stats();
        let (setup, slots, rt_slot) = Self::layout(
            &self.settings,
            &self.spec,
            &self.models,
            &self.fikit_profiles,
        );
        match self.build.drv.rebuild(setup) {
            Ok(()) => {
                let drv = &mut self.build.drv;
                // The daemon reports padding counters, not the per-launch
                // overhead samples a benchmark keeps (they would grow for
                // its life).
                drv.pad = drv.pad.take().map(|p| p.keep_overhead_samples(false));
                self.build.base = now;
                self.build.slots = slots;
                self.build.rt_slot = rt_slot;
                self.build.preemptions_seen = 0;
                self.fikit_saved = 0;
                self.padding_before = padding;
                if let Some(a) = aker {
                    add_aker(&mut self.aker_before, a);
                }
                for d in self.dstreams.values_mut() {
                    d.be_slots.clear();
                    d.sched_streams.clear();
                    d.preempted = false;
                }
                self.rebuild_pending = false;
                tracing::debug!(policy = %self.settings.policy, models = self.models.len(), "scheduler rebuilt");
            }
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "scheduler rebuild failed; keeping the previous one")
            }
        }
    }

    fn fikit_policy(&self) -> Option<&reef_sched::fikit::Fikit> {
        self.build
            .drv
            .sched
            .scheduler()
            .policy()
            .as_any()
            .and_then(|a| a.downcast_ref::<reef_sched::fikit::Fikit>())
    }

    /// Keeps and writes the profiles FIKIT has built since the last save
    /// (fikit.txt Fig. 3: measured once). A file that cannot be written is
    /// logged; the profile still serves until the daemon exits.
    fn save_fikit_profiles(&mut self) {
        let Some(f) = self.fikit_policy() else {
            return;
        };
        let built = f.stats().profiles_built;
        if built <= self.fikit_saved {
            return;
        }
        let measured: Vec<reef_sched::fikit::profile::Profile> = f
            .profiles()
            .filter(|p| self.fikit_profiles.get(&p.task_key) != Some(*p))
            .cloned()
            .collect();
        self.fikit_saved = built;
        for p in measured {
            if let Some(m) = self.models.iter().find(|m| m.name == p.task_key) {
                let path = super::fikit_store::path(
                    self.settings.fikit_profile_dir.as_deref(),
                    &m.name,
                    &m.model.path,
                );
                match super::fikit_store::save(&path, &p) {
                    Ok(()) => {
                        tracing::info!(task = %p.task_key, path = %path.display(), runs = p.runs, "FIKIT profile written")
                    }
                    Err(e) => {
                        tracing::warn!(task = %p.task_key, path = %path.display(), error = %e, "FIKIT profile not written")
                    }
                }
            }
            self.fikit_profiles.insert(p.task_key.clone(), p);
        }
    }

    fn model_index(&self, name: &str) -> Option<usize> {
        self.models.iter().position(|m| m.name == name)
    }

    /// Moves waiting requests into the scheduler where their stream has none inside.
    fn forward(&mut self, out: &mut Vec<EngineEvent>) {
        if self.rebuild_pending {
            return;
        }
        // Walks the streams by key without collecting them: this runs at
        // every catch-up, on the RT control path too.
        let mut next = self.dstreams.keys().next().copied();
        while let Some(id) = next {
            next = self
                .dstreams
                .range((std::ops::Bound::Excluded(id), std::ops::Bound::Unbounded))
                .next()
                .map(|(&k, _)| k);
            let d = &self.dstreams[&id];
            if d.inflight.is_some() || d.queue.is_empty() {
                continue;
            }
            let (task, model) = d.queue[0].clone();
            let Some(mi) = self.model_index(&model) else {
                let d = self.dstreams.get_mut(&id).expect("stream");
                d.queue.pop_front();
                out.push(EngineEvent::TaskRejected {
                    task,
                    reason: format!("model {model} was unloaded"),
                });
                continue;
            };
            let level = d.priority.get();
            let slot = match d.priority.is_rt() {
                true => self.build.rt_slot[mi],
                false => match d.be_slots.get(&model) {
                    Some(&s) => s,
                    None => {
                        let free = self.build.slots.iter().position(|s| {
                            s.model == mi
                                && s.class == Class::BestEffort
                                && s.owner.is_none()
                                && s.inflight == 0
                        });
                        let Some(s) = free else {
                            // Every BE client of this model is taken: wait.
                            continue;
                        };
                        self.build.slots[s].owner = Some(id);
                        // The client takes its stream's level (FIKIT's
                        // queues Q1..Q9; REEF's policies go by class).
                        if let RunSched::Plain(sc) = &mut self.build.drv.sched {
                            sc.set_priority(ClientId(s as u32), level);
                        }
                        self.dstreams
                            .get_mut(&id)
                            .expect("stream")
                            .be_slots
                            .insert(model.clone(), s);
                        s
                    }
                },
            };
            let sstream = self
                .build
                .drv
                .sched
                .scheduler()
                .core()
                .stream_of(ClientId(slot as u32));
            let d = self.dstreams.get_mut(&id).expect("stream");
            d.queue.pop_front();
            d.inflight = Some(task);
            let newly_bound = d.sched_streams.insert(sstream.0);
            let held = d.preempted && newly_bound;
            let ns = d.ns;
            self.build.slots[slot].inflight += 1;
            let kernels = self.models[mi].shapes.len();
            self.tasks.insert(
                task,
                TaskRec {
                    failed: None,
                    dstream: Some(id),
                    slot,
                    ns,
                    launched: false,
                    next_kernel: 0,
                    kernels,
                },
            );
            let t = self.build.drv.dev.now();
            if held {
                // Preempted by command before it had work on this
                // scheduler stream: the stream is stopped before the
                // request reaches it, and holds it until `resume`.
                self.build
                    .drv
                    .sched
                    .handle(t, Event::PreemptCommand { stream: sstream });
                self.apply_actions(out);
            }
            if let RunSched::Aker(a) = &mut self.build.drv.sched {
                // The query's QoS target (Aker §8.3), else the default.
                let q = self.qos.remove(&task);
                if self.build.slots[slot].class == Class::RealTime {
                    a.set_qos(ClientId(slot as u32), q);
                }
            }
            self.build
                .drv
                .arrive(t, RequestId(task), ClientId(slot as u32), mi, None);
            self.apply_actions(out);
            // A new request starts from fresh buffers: its input, and
            // intermediates not carried over from the previous request of
            // this stream. Kernels read their inputs when they complete, so
            // doing this after the first launches (off the control path) is
            // equivalent to doing it before.
            if let Some(values) = self.build.drv.dev.values() {
                for b in 0..self.models[mi].model.buffers.len() {
                    let id = buffer(ns, b);
                    values.set(id, ValueTracker::initial(id));
                }
            }
        }
    }

    /// Performs the scheduler's pending actions (reef-exec's interpreter)
    /// and takes in what they did.
    fn apply_actions(&mut self, out: &mut Vec<EngineEvent>) {
        self.drive(out, |drv, view, o| drv.apply(view, o));
    }

    /// Runs the device to simulator time `t` (reef-exec's step: device
    /// events, then the clients' host issues at `t`) and takes in what the
    /// actions did.
    fn step(&mut self, t: u64, out: &mut Vec<EngineEvent>) {
        self.drive(out, |drv, view, o| drv.step(t, view, o));
    }

    /// Calls `f` with the driver and the engine's tasks, then takes in the
    /// outcomes.
    fn drive(
        &mut self,
        out: &mut Vec<EngineEvent>,
        f: impl FnOnce(&mut Driver<D>, &View<'_>, &mut Vec<Outcome>),
    ) {
        let mut o = std::mem::take(&mut self.outcomes);
        let Build { drv, slots, .. } = &mut self.build;
        let view = View {
            tasks: &self.tasks,
            models: &self.models,
            slots,
        };
        f(drv, &view, &mut o);
        self.absorb(&mut o, out);
        self.outcomes = o;
    }

    /// What performed actions did, as engine events. A device refusal is
    /// reported as [`EngineEvent::DeviceError`] with the action, which the
    /// runtime counts (`device_errors`) and logs (issue 18 item 6); nothing
    /// is dropped.
    fn absorb(&mut self, o: &mut Vec<Outcome>, out: &mut Vec<EngineEvent>) {
        let now = self.build.drv.dev.now();
        for x in o.drain(..) {
            match x {
                Outcome::Queued {
                    req,
                    kernel,
                    issued,
                } => self.kernel_queued(req.0, kernel as usize, now, issued, out),
                Outcome::Launched(kind) => {
                    if let LaunchKind::Padded {
                        req,
                        kernel,
                        be_parts,
                    } = kind
                    {
                        tracing::debug!(task = req.0, kernel, parts = be_parts, "padded launch");
                    }
                    out.push(EngineEvent::KernelsLaunched { count: 1 })
                }
                Outcome::Failed { action, error, req } => {
                    if let Some(rec) = req.and_then(|r| self.tasks.get_mut(&r.0)) {
                        rec.failed
                            .get_or_insert_with(|| format!("{action}: {error}"));
                    }
                    out.push(EngineEvent::DeviceError { action, error })
                }
                Outcome::Restored { req, from_kernel } => {
                    if let Some(rec) = self.tasks.get_mut(&req.0) {
                        rec.next_kernel = from_kernel as usize;
                    }
                    out.push(EngineEvent::Restored { task: req.0 });
                }
                Outcome::Done { req, .. } | Outcome::Rejected { req, .. } => {
                    let done = matches!(x, Outcome::Done { .. });
                    let task = req.0;
                    let Some(rec) = self.tasks.remove(&task) else {
                        continue;
                    };
                    let b = &mut self.build;
                    let slot = rec.slot;
                    b.slots[slot].inflight = b.slots[slot].inflight.saturating_sub(1);
                    if let Some(d) = rec.dstream.and_then(|d| self.dstreams.get_mut(&d)) {
                        if d.inflight == Some(task) {
                            d.inflight = None;
                            self.freed |= !d.queue.is_empty();
                        }
                    }
                    if rec.dstream.is_none() {
                        // An orphan of a closed stream: nobody waits for it;
                        // its buffer namespace is free now.
                        self.free_ns.push(rec.ns);
                        continue;
                    }
                    let ns = rec.ns;
                    if let Some(reason) = rec.failed {
                        // A kernel of it never reached the device.
                        let _ = b.drv.dev.verified(req);
                        out.push(EngineEvent::TaskFailed { task, reason });
                        continue;
                    }
                    if !done {
                        out.push(EngineEvent::TaskRejected {
                            task,
                            reason: format!(
                                "policy {} does not serve this class of request",
                                self.settings.policy
                            ),
                        });
                        continue;
                    }
                    // The simulator tracks values: the outputs' versions
                    // against one unpreempted run's; a GPU compares the
                    // output bytes itself.
                    let verified = match b.drv.dev.values() {
                        Some(values) => {
                            let m = &mut self.models[b.slots[slot].model];
                            let expected = m.expected_outputs(ns);
                            Some(expected.iter().all(|&(buf, v)| values.get(buf) == v))
                        }
                        None => b.drv.dev.verified(req),
                    };
                    out.push(EngineEvent::TaskDone {
                        task,
                        at: b.base + now,
                        verified,
                    });
                }
            }
        }
        // Each preemption is reported once it has finished (its evicted and
        // killed kernels are counted by then), in order; then the finished
        // records are dropped, or they would grow by one per preemption for
        // the daemon's life.
        let b = &mut self.build;
        let sched = &mut b.drv.sched;
        let base = sched.preemptions_base();
        let recs = sched.preemptions();
        let mut i = b.preemptions_seen.saturating_sub(base);
        while let Some(r) = recs.get(i).filter(|r| r.end.is_some()) {
            out.push(EngineEvent::Preempted {
                level: r.level.number(),
                kernels: (r.dropped_from_host_queue + r.evicted + r.killed) as u64,
            });
            i += 1;
        }
        b.preemptions_seen = base + i;
        sched.forget_finished_preemptions();
    }

    /// Records that kernel `k` of `task` entered the device queue.
    fn kernel_queued(
        &mut self,
        task: u64,
        k: usize,
        now: u64,
        issued: std::time::Instant,
        out: &mut Vec<EngineEvent>,
    ) {
        let Some(rec) = self.tasks.get_mut(&task) else {
            return;
        };
        rec.next_kernel = rec.next_kernel.max(k + 1);
        if !rec.launched {
            rec.launched = true;
            out.push(EngineEvent::FirstKernelQueued {
                task,
                at: self.build.base + now,
                issued,
            });
        }
    }

    /// Padding counters of the current build plus the replaced ones.
    fn padding_now(&self) -> PaddingCounters {
        let mut c = self.padding_before;
        if let RunSched::Padded(d) = &self.build.drv.sched {
            let n = d.dkp_counters();
            c.rt_launches += n.rt_launches;
            c.padded_launches += n.padded_launches;
            c.be_blocks_padded += n.be_blocks_padded;
            c.be_kernels_completed += n.be_kernels_completed;
        }
        c
    }

    fn run_device(&mut self, now: Nanos, out: &mut Vec<EngineEvent>) {
        self.run_device_only(now, out);
        self.maybe_rebuild(now);
        self.forward(out);
    }

    fn run_device_only(&mut self, now: Nanos, out: &mut Vec<EngineEvent>) {
        let t_now = self.sim_now(now);
        if self.build.drv.dev.live() {
            // A GPU's events are seen now: one step to the present.
            self.step(t_now, out);
            if std::mem::take(&mut self.freed) {
                self.forward(out);
            }
            return;
        }
        while let Some(t) = self.build.drv.next_time().filter(|&t| t <= t_now) {
            self.step(t, out);
            if std::mem::take(&mut self.freed) {
                self.forward(out);
            }
        }
        self.step(t_now, out);
    }

    fn sched_streams_of(&self, stream: u64) -> Vec<u32> {
        self.dstreams
            .get(&stream)
            .map(|d| d.sched_streams.iter().copied().collect())
            .unwrap_or_default()
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
        let shapes = KernelShape::for_model(&model.model, &self.spec).map_err(|e| {
            EngineError::Invalid(format!(
                "model {}: kernel {} cannot run on {}: {}",
                model.name, e.kernel, self.spec.name, e.problem
            ))
        })?;
        if shapes.is_empty() {
            return Err(EngineError::Invalid(format!(
                "model {} has no kernels",
                model.name
            )));
        }
        if self.models.iter().any(|m| m.name == model.name) {
            self.build.drv.dev.unload(&model.name);
        }
        self.build.drv.dev.load(&model)?;
        self.models.retain(|m| m.name != model.name);
        self.models.push(Prepared {
            name: model.name,
            model: model.model,
            shapes,
            idempotence: model.idempotence.map(|m| (*m).clone()),
            expected: HashMap::new(),
        });
        self.rebuild_pending = true;
        let now = self.build.base + self.build.drv.dev.now();
        self.maybe_rebuild(now);
        Ok(())
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

    fn submit(
        &mut self,
        now: Nanos,
        task: u64,
        stream: u64,
        model: &str,
        out: &mut Vec<EngineEvent>,
    ) -> Result<(), EngineError> {
        if self.model_index(model).is_none() {
            return Err(EngineError::NotFound(format!(
                "model {model} is not loaded"
            )));
        }
        if !self.dstreams.contains_key(&stream) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(be_streams: usize) -> SchedEngine {
        engine_with("reef-nodkp", be_streams, &["vgg"])
    }

    fn engine_with(policy: &str, be_streams: usize, models: &[&str]) -> SchedEngine {
        let mut e = SchedEngine::new(SchedSettings {
            preset: "mi50".into(),
            policy: policy.into(),
            dq_capacity: 4,
            be_streams_per_model: be_streams,
            seed: 0,
            fikit: reef_sched::fikit::FikitConfig::default(),
            fikit_profile_dir: None,
            host_gap_ns: None,
        })
        .unwrap();
        for name in models {
            let m = reef_model::load_named(&reef_model::default_models_dir(), name).unwrap();
            e.add_model(EngineModel {
                name: name.to_string(),
                model: Arc::new(m),
                idempotence: None,
            })
            .unwrap();
        }
        e
    }

    /// Runs the engine in virtual time until it is idle; returns the events.
    fn run(e: &mut SchedEngine, out: &mut Vec<EngineEvent>) -> Nanos {
        let mut now = 0;
        while let Some(t) = e.next_event_time() {
            now = t;
            e.advance(t, out);
        }
        now
    }

    fn done(out: &[EngineEvent]) -> Vec<(u64, Option<bool>)> {
        out.iter()
            .filter_map(|e| match e {
                EngineEvent::TaskDone { task, verified, .. } => Some((*task, *verified)),
                _ => None,
            })
            .collect()
    }

    fn fikit_engine(dir: &std::path::Path) -> SchedEngine {
        let mut e = SchedEngine::new(SchedSettings {
            preset: "mi50".into(),
            policy: "fikit".into(),
            dq_capacity: 4,
            be_streams_per_model: 2,
            seed: 0,
            fikit: reef_sched::fikit::FikitConfig {
                runs: 2,
                ..Default::default()
            },
            fikit_profile_dir: Some(dir.to_path_buf()),
            host_gap_ns: Some(300_000),
        })
        .unwrap();
        for name in ["vgg", "resnet152"] {
            let m = reef_model::load_named(&reef_model::default_models_dir(), name).unwrap();
            e.add_model(EngineModel {
                name: name.to_string(),
                model: Arc::new(m),
                idempotence: None,
            })
            .unwrap();
        }
        e
    }

    #[test]
    fn fikit_measures_then_fills_host_gaps_and_keeps_its_profiles_on_disk() {
        let dir = std::env::temp_dir().join(format!("reef-fikit-engine-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut e = fikit_engine(&dir);
        let f = e.fikit().unwrap();
        assert_eq!(f.measuring.len(), 2, "no profiles yet: {f:?}");
        assert_eq!(f.profiles_missing_or_stale, 2);
        let mut out = Vec::new();
        // Two clients at priorities 0 and 5.
        e.open_stream(1, Priority::level(5).unwrap()).unwrap();
        e.open_stream(3, Priority::Rt).unwrap();
        for i in 0..4 {
            e.submit(0, 100 + i, 1, "resnet152", &mut out).unwrap();
        }
        for i in 0..8u64 {
            let t = 1_000_000 + i * 40_000_000;
            e.advance(t, &mut out);
            e.submit(t, 300 + i, 3, "vgg", &mut out).unwrap();
        }
        run(&mut e, &mut out);
        let d = done(&out);
        assert_eq!(d.len(), 12, "{d:?}");
        let slot = e
            .build
            .slots
            .iter()
            .position(|s| s.owner == Some(1))
            .unwrap();
        let core = e.build.drv.sched.scheduler().core();
        assert_eq!(core.priority(ClientId(slot as u32)), 5);
        assert_eq!(core.priority(ClientId(e.build.rt_slot[0] as u32)), 0);
        assert!(d.iter().all(|(_, v)| *v == Some(true)), "{d:?}");
        let f = e.fikit().unwrap();
        assert!(f.measuring.is_empty(), "{f:?}");
        assert_eq!((f.profiles_built, f.measured_runs), (2, 4));
        // The RT task's 300 us host gaps held BE kernels.
        if std::env::var("FIKIT_DEBUG").is_ok() {
            for n in ["vgg", "resnet152"] {
                eprintln!(
                    "{}",
                    std::fs::read_to_string(dir.join(format!("{n}.fikit.json")))
                        .unwrap()
                        .chars()
                        .take(1500)
                        .collect::<String>()
                );
            }
        }
        assert!(f.gaps_filled > 0 && f.fill_kernels > 0, "{f:?}");
        for n in ["vgg", "resnet152"] {
            assert!(dir.join(format!("{n}.fikit.json")).exists());
        }
        // A restarted daemon finds the profiles: nothing to measure.
        let e2 = fikit_engine(&dir);
        let f2 = e2.fikit().unwrap();
        assert!(f2.measuring.is_empty(), "{f2:?}");
        assert_eq!(f2.profiles_missing_or_stale, 0);
        // A profile of another kernel sequence (the model changed) is stale:
        // that task measures again; a file that is not a profile counts as
        // missing. Neither is an error.
        let p = dir.join("vgg.fikit.json");
        let text = std::fs::read_to_string(&p).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["fingerprint"] = "0000000000000001".into();
        std::fs::write(&p, v.to_string()).unwrap();
        std::fs::write(dir.join("resnet152.fikit.json"), "not json").unwrap();
        let e3 = fikit_engine(&dir);
        let f3 = e3.fikit().unwrap();
        assert_eq!(f3.measuring.len(), 2, "{f3:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A request handled while the device is behind the wall clock (the
    /// daemon was descheduled) must not start before it arrived: the
    /// device's past events are replayed first, then the task is queued.
    #[test]
    fn a_task_submitted_while_the_device_lags_starts_at_its_arrival() {
        let mut e = engine(1);
        let mut out = Vec::new();
        e.open_stream(1, Priority::Be).unwrap();
        e.submit(0, 1, 1, "vgg", &mut out).unwrap();
        // vgg alone takes 4.73 ms; nothing advances the device until a
        // second request arrives 20 ms later.
        let late = 20_000_000;
        e.submit(late, 2, 1, "vgg", &mut out).unwrap();
        run(&mut e, &mut out);
        let at = |task| {
            out.iter()
                .find_map(|x| match x {
                    EngineEvent::TaskDone { task: t, at, .. } if *t == task => Some(*at),
                    _ => None,
                })
                .unwrap()
        };
        assert!(at(1) < late, "task 1 done at {}", at(1));
        assert!(
            at(2) >= late + 4_000_000,
            "task 2 arrived at {late} and was done at {}",
            at(2)
        );
    }

    #[test]
    fn be_streams_beyond_the_slots_wait_for_a_free_one() {
        let mut e = engine(1);
        let mut out = Vec::new();
        e.open_stream(1, Priority::Be).unwrap();
        e.open_stream(2, Priority::Be).unwrap();
        e.submit(0, 10, 1, "vgg", &mut out).unwrap();
        e.submit(0, 20, 2, "vgg", &mut out).unwrap();
        // Only stream 1 got the model's single BE client.
        assert_eq!(e.task_progress(20).unwrap().state, TaskState::Queued);
        assert!(out
            .iter()
            .any(|x| matches!(x, EngineEvent::FirstKernelQueued { task: 10, .. })));
        assert!(!out
            .iter()
            .any(|x| matches!(x, EngineEvent::FirstKernelQueued { task: 20, .. })));
        let t = run(&mut e, &mut out);
        assert_eq!(done(&out), vec![(10, Some(true))]);
        // Stream 1 keeps its client while open; closing it frees it.
        let dropped = e.close_stream(t, 1, &mut out);
        assert!(dropped.is_empty());
        run(&mut e, &mut out);
        assert_eq!(done(&out), vec![(10, Some(true)), (20, Some(true))]);
    }

    #[test]
    fn closing_a_stream_drops_its_queue_and_orphans_its_running_request() {
        let mut e = engine(2);
        let mut out = Vec::new();
        e.open_stream(1, Priority::Be).unwrap();
        for task in 1..=3 {
            e.submit(0, task, 1, "vgg", &mut out).unwrap();
        }
        e.advance(1_000_000, &mut out);
        let mut dropped = e.close_stream(1_000_000, 1, &mut out);
        dropped.sort();
        assert_eq!(dropped, vec![1, 2, 3]);
        assert_eq!(e.queue_depths(1), (0, 0));
        run(&mut e, &mut out);
        // The orphan finished without a TaskDone; the device is idle and a
        // new stream gets the freed client.
        assert!(done(&out).is_empty());
        assert!(e.next_event_time().is_none());
        e.open_stream(2, Priority::Be).unwrap();
        e.submit(50_000_000, 4, 2, "vgg", &mut out).unwrap();
        run(&mut e, &mut out);
        assert_eq!(done(&out), vec![(4, Some(true))]);
    }

    #[test]
    fn a_refused_preemption_action_is_reported_not_dropped() {
        let mut e = engine(1);
        let mut out = Vec::new();
        e.open_stream(1, Priority::Be).unwrap();
        e.open_stream(2, Priority::Rt).unwrap();
        e.submit(0, 1, 1, "vgg", &mut out).unwrap();
        e.advance(2_000_000, &mut out);
        // Fault injection: the BE client's device stream is gone (the
        // simulator answers with its own error, as a driver whose queue
        // was destroyed would).
        for s in e.sched_streams_of(1) {
            e.build.drv.inject_lost_stream(StreamId(s));
        }
        e.submit(2_000_000, 2, 2, "vgg", &mut out).unwrap();
        run(&mut e, &mut out);
        let errors: Vec<(&str, &str)> = out
            .iter()
            .filter_map(|x| match x {
                EngineEvent::DeviceError { action, error } => {
                    Some((action.as_str(), error.as_str()))
                }
                _ => None,
            })
            .collect();
        assert!(!errors.is_empty(), "{out:?}");
        for (action, error) in &errors {
            assert!(
                [
                    "set preempt flag",
                    "kill stream",
                    "clear the device queue",
                    "launch"
                ]
                .iter()
                .any(|a| action.starts_with(a)),
                "{action}"
            );
            assert!(!error.is_empty());
        }
        assert!(
            errors.iter().any(|(a, _)| a.starts_with("kill stream")),
            "the RT arrival's kill was refused and reported: {errors:?}"
        );
        // The RT request still completes, correctly.
        assert!(done(&out).contains(&(2, Some(true))), "{out:?}");
    }

    #[test]
    fn an_rt_arrival_preempts_be_work_and_every_output_stays_correct() {
        let mut e = engine(1);
        let mut out = Vec::new();
        e.open_stream(1, Priority::Be).unwrap();
        e.open_stream(2, Priority::Rt).unwrap();
        e.submit(0, 1, 1, "vgg", &mut out).unwrap();
        e.advance(2_000_000, &mut out);
        let be = e.task_progress(1).unwrap();
        e.submit(2_000_000, 2, 2, "vgg", &mut out).unwrap();
        run(&mut e, &mut out);
        let preempted: Vec<u64> = out
            .iter()
            .filter_map(|x| match x {
                EngineEvent::Preempted { kernels, .. } => Some(*kernels),
                _ => None,
            })
            .collect();
        assert_eq!(
            preempted.len(),
            1,
            "the RT arrival must preempt the running BE request once"
        );
        // Dropped from the host queue (not yet launched), plus at least the
        // running kernel killed: counted once the preemption has finished.
        let dropped = (be.kernels - be.next_kernel) as u64;
        assert!(preempted[0] > dropped, "{preempted:?} vs {dropped} dropped");
        let mut d = done(&out);
        d.sort();
        assert_eq!(d, vec![(1, Some(true)), (2, Some(true))]);
        assert!(out
            .iter()
            .any(|x| matches!(x, EngineEvent::Restored { task: 1 })));
    }

    /// RT vgg requests arrive every 6 ms while two BE resnet152 streams
    /// keep the device busy: `(events, padding counters)`.
    fn rt_over_be(policy: &str) -> (Vec<EngineEvent>, Option<PaddingCounters>) {
        let mut e = engine_with(policy, 2, &["vgg", "resnet152"]);
        let mut out = Vec::new();
        e.open_stream(1, Priority::Be).unwrap();
        e.open_stream(2, Priority::Be).unwrap();
        e.open_stream(3, Priority::Rt).unwrap();
        for i in 0..4 {
            e.submit(0, 100 + i, 1, "resnet152", &mut out).unwrap();
            e.submit(0, 200 + i, 2, "resnet152", &mut out).unwrap();
        }
        for i in 0..8u64 {
            let t = 1_000_000 + i * 6_000_000;
            e.advance(t, &mut out);
            e.submit(t, 300 + i, 3, "vgg", &mut out).unwrap();
        }
        run(&mut e, &mut out);
        // Every preemption was reported, and none is kept once finished.
        let reported = out
            .iter()
            .filter(|x| matches!(x, EngineEvent::Preempted { .. }))
            .count();
        assert_eq!(reported, e.build.drv.sched.preemptions_base());
        assert!(reported >= 8, "{reported} preemptions for 8 RT requests");
        assert!(e.build.drv.sched.preemptions().is_empty());
        if let Some(p) = &e.build.drv.pad {
            assert!(
                p.stats.overhead_ns.is_empty(),
                "the daemon keeps no samples"
            );
        }
        (out, e.padding())
    }

    #[test]
    fn reef_pads_rt_kernels_with_be_blocks_and_every_output_stays_correct() {
        let (out, pad) = rt_over_be("reef");
        let d = done(&out);
        assert_eq!(d.len(), 16, "{d:?}");
        assert!(d.iter().all(|x| x.1 == Some(true)), "{d:?}");
        let pad = pad.expect("reef pads");
        assert!(pad.padded_launches > 0, "{pad:?}");
        assert!(pad.be_blocks_padded > 0, "{pad:?}");
        assert!(pad.padded_launches <= pad.rt_launches);
        // The same work without padding: nothing padded, same outputs.
        let (out, pad) = rt_over_be("reef-nodkp");
        assert_eq!(pad.expect("counters").padded_launches, 0);
        assert!(done(&out).iter().all(|x| x.1 == Some(true)));
        let (out, pad) = rt_over_be("reef-dkp-mv");
        assert!(pad.unwrap().padded_launches > 0);
        let d = done(&out);
        assert_eq!(d.len(), 16);
        assert!(d.iter().all(|x| x.1 == Some(true)), "{d:?}");
    }

    #[test]
    fn a_be_stream_stopped_by_command_is_not_padded_until_resumed() {
        let mut e = engine_with("reef", 1, &["vgg", "resnet152"]);
        let mut out = Vec::new();
        e.open_stream(1, Priority::Be).unwrap();
        e.open_stream(2, Priority::Rt).unwrap();
        e.submit(0, 1, 1, "resnet152", &mut out).unwrap();
        e.advance(3_000_000, &mut out);
        e.preempt(3_000_000, 1, &mut out).unwrap();
        let stopped = e.task_progress(1).unwrap();
        assert_eq!(stopped.state, TaskState::Preempted);
        // RT work on an otherwise idle device: the stopped task's kernels
        // would fit the CUs the RT kernels leave free.
        let mut t = 3_000_000;
        for i in 0..5 {
            e.submit(t, 10 + i, 2, "vgg", &mut out).unwrap();
            while let Some(n) = e.next_event_time() {
                t = n;
                e.advance(t, &mut out);
            }
        }
        let pad = e.padding().unwrap();
        assert!(pad.rt_launches > 0);
        assert_eq!(pad.padded_launches, 0, "{pad:?}");
        assert_eq!(e.task_progress(1).unwrap().next_kernel, stopped.next_kernel);
        assert_eq!(done(&out).len(), 5);
        // Resumed, it finishes with correct outputs.
        e.resume(t, 1, &mut out).unwrap();
        run(&mut e, &mut out);
        assert!(done(&out).contains(&(1, Some(true))), "{:?}", done(&out));
    }
}

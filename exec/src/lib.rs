//! reef-exec: runs reef-sched's actions, including padded launches, on
//! reef-sim. The glue between the sans-IO scheduler core and the simulated
//! device that both event loops share: the virtual-time DISB runner
//! (reef-bench, `bench/src/disb/runner.rs`) and the daemon's wall-clock
//! engine (reefd, `reefd/src/engine/sched.rs`). Each caller owns its event
//! loop and its clock; this crate owns what a scheduler action means on the
//! simulator.
//!
//! - [`RunSched`]: the scheduler of a run, the plain preemption core or the
//!   core with dynamic kernel padding (`reef`, `reef-dkp-mv`), built from a
//!   policy name by [`RunSched::new`].
//! - [`PadExec`]: executes padded launches (REEF §5.1, Fig. 12) on a
//!   device that places blocks. One [`Device::launch_padded`] on the
//!   real-time stream, part 0
//!   the real-time kernel on CUs `0..rt_cus`, then one part per best-effort
//!   task on its CU range and block range; all parts take the padded
//!   launch's resource demand (the proxy kernel's registers per thread, §5.1
//!   "proxy kernels", and the largest shared memory, sized at launch as
//!   dynamic shared memory) through derived kernel shapes. The parts share
//!   one device-queue slot, one fetch and one dispatch and start together,
//!   so rule 1 (§5.2) needs no launch skew. The padded launch is reported to
//!   the scheduler as the real-time kernel: started when its real-time part
//!   starts, completed (or evicted, or killed) once every part has finished.
//!   Derived shapes keep their kernel's identity, so value tracking sees the
//!   same computation whichever launch ran its blocks.
//! - [`table`], [`limits`], [`block_cost`], [`kernel_char`]: the offline
//!   padding table (§5.2 per-occupancy block latencies, §5.3 versions) of a
//!   run's models on one simulated device.
//!
//! Layering: reef-sched never sees the simulator and reef-sim never sees a
//! policy; only this crate knows both.

pub mod aker;
pub mod device;
pub mod drive;

pub use device::Device;

pub use drive::{
    own_device_queues, places_blocks, reefnv_runtime, Driver, LaunchKind, Outcome, Setup, Work,
};

/// Placement's view of a simulated device (CASE/MGB §III-B: SMs and their
/// block, warp and thread limits, and memory), from its preset.
pub fn device_limits(s: &reef_sim::DeviceSpec) -> reef_sched::place::DeviceLimits {
    reef_sched::place::DeviceLimits {
        sms: s.compute_units,
        warp_size: s.wave_size,
        max_warps_per_sm: s.max_waves_per_cu,
        max_blocks_per_sm: s.max_blocks_per_cu,
        max_threads_per_sm: s.max_threads_per_cu,
        memory: s.memory_bytes,
    }
}

use reef_model::Model;
use reef_sched::dkp::{
    BlockCost, DeviceLimits, DkpAction, DkpTable, KernelChar, PaddedLaunch, PaddingScheduler,
    Selector, Variant,
};
use reef_sched::{
    ClientSpec, Config, Counters, Event, KernelTag, ModelInfo, PreemptionRecord, RequestId,
    Scheduler, StreamId, Time,
};
use reef_sim::{
    BufferId, CuSet, DeviceEvent, DeviceSpec, EventKind, KernelLaunch, KernelShape, LaunchId, Tags,
};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;

/// A model as one simulated device executes it: its schedule and the
/// kernel shapes the simulator runs (one per kernel, or only shapes for a
/// synthetic model without a schedule).
pub trait ModelShapes {
    /// Directory name (`vgg`, ...), for messages.
    fn name(&self) -> &str;
    fn model(&self) -> &Model;
    fn shapes(&self) -> &[Arc<KernelShape>];
}

/// A model ready to run on one device: its schedule and its simulator
/// shapes.
#[derive(Clone)]
pub struct PreparedModel {
    /// Directory name (`vgg`, ...).
    pub name: String,
    pub model: Model,
    pub shapes: Vec<Arc<KernelShape>>,
}

impl ModelShapes for PreparedModel {
    fn name(&self) -> &str {
        &self.name
    }
    fn model(&self) -> &Model {
        &self.model
    }
    fn shapes(&self) -> &[Arc<KernelShape>] {
        &self.shapes
    }
}

impl PreparedModel {
    pub fn new(model: Model, spec: &DeviceSpec) -> anyhow::Result<Self> {
        let shapes = KernelShape::for_model(&model, spec).map_err(|e| {
            anyhow::anyhow!(
                "{}: kernel {} cannot run on device {}: {}",
                model.path.display(),
                e.kernel,
                spec.name,
                e.problem
            )
        })?;
        Ok(Self {
            name: model.name.clone(),
            model,
            shapes,
        })
    }
}

/// Replays one unpreempted run of `m` into `reference` (value tracking,
/// DESIGN.md: the run every request's outputs are compared with), its
/// storage `b` in buffer `buffer(b)`; the buffers its kernels write are
/// added to `outputs`.
pub fn replay_unpreempted(
    reference: &mut reef_sim::ValueTracker,
    m: &dyn ModelShapes,
    buffer: impl Fn(usize) -> BufferId,
    outputs: &mut impl Extend<BufferId>,
) {
    for (k, kern) in m.model().kernels.iter().enumerate() {
        let r: Vec<BufferId> = kern.reads.iter().map(|&x| buffer(x)).collect();
        let w: Vec<BufferId> = kern.writes.iter().map(|&x| buffer(x)).collect();
        let sh = &m.shapes()[k];
        reference.complete(sh.identity, &r, &w, 0..sh.blocks as u64, sh.blocks as u64);
        outputs.extend(w);
    }
}

/// The scheduler event a (filtered) device event is for, on the
/// scheduler's stream `stream`.
pub fn sched_event(ev: &DeviceEvent, stream: StreamId) -> Event {
    let tag = KernelTag {
        req: RequestId(ev.tags.task),
        kernel: ev.tags.kernel,
    };
    match ev.kind {
        EventKind::Started => Event::KernelStarted { stream, tag },
        EventKind::Completed => Event::KernelCompleted { stream, tag },
        EventKind::Evicted | EventKind::Cleared => Event::KernelEvicted { stream, tag },
        EventKind::Killed { .. } => Event::KernelKilled { stream, tag },
    }
}

/// The device limits the selection policy needs.
pub fn limits(spec: &DeviceSpec) -> DeviceLimits {
    DeviceLimits {
        compute_units: spec.compute_units,
        wave_size: spec.wave_size,
        max_waves_per_cu: spec.max_waves_per_cu,
        max_threads_per_cu: spec.max_threads_per_cu,
        max_blocks_per_cu: spec.max_blocks_per_cu,
        lds_bytes_per_cu: spec.lds_bytes_per_cu,
        registers_per_cu: spec.registers_per_cu,
        // GCN / Vega: 4 SIMD units per CU (AMD "Vega" ISA guide §2).
        simds_per_cu: 4,
    }
}

/// The scheduler configuration for a simulated device: the preemption
/// capabilities its preset supports and the device-queue capacity of
/// preemptible streams; the rest at its defaults.
pub fn sched_config(spec: &DeviceSpec, dq_capacity: usize) -> Config {
    Config {
        dq_capacity,
        device: reef_sched::DeviceCaps {
            // A kill issued before a launch lands before the launch's
            // blocks can start (host launch, fetch, dispatch): REEF's
            // synchronous CU reset before the real-time task (§3.1).
            kill_precedes_later_launches: spec
                .levels()
                .contains(&reef_sim::PreemptLevel::KillRunning)
                && spec.kill_latency_ns < spec.launch_path_ns(),
            ..reef_sched::DeviceCaps::from_levels(spec.levels().iter().map(|&l| l as u8))
        },
        ..Config::default()
    }
}

/// The block-cost parameters of the device (see
/// [`reef_sched::dkp::table`]).
pub fn block_cost(spec: &DeviceSpec) -> BlockCost {
    BlockCost {
        launch_path_ns: spec.launch_path_ns(),
        min_block_ns: spec.min_block_ns,
        profile_scale: (!spec.measured_profiles).then_some(spec.profile_scale),
        memory_bandwidth_bytes_per_s: spec.memory_bandwidth_bytes_per_s,
    }
}

/// The offline profile of one simulator kernel shape: what the device
/// executes (grid, block, resources, block curve), with no inferred
/// register demand for a grid-limited curve. The reference against which
/// the schedule-only builder ([`reef_sched::dkp::build_table`]) is tested.
pub fn kernel_char(spec: &DeviceSpec, s: &KernelShape) -> Option<KernelChar> {
    let grid_limited = s.curve_len() as u64 >= s.blocks as u64;
    shape_char(spec, s, if grid_limited { 0 } else { s.regs_per_block })
}

/// The offline profile of a compiled kernel (reef-compile: recorded work
/// and ptxas resources, no measured curve) from its simulator shape: the
/// block curve of the simulator's cost model (`reef_sim::costmodel`, the
/// one the kernel runs with) and its registers from its `resources`, which
/// are the compiler's, not inferred from a curve, so they are kept for a
/// grid-limited kernel too.
pub fn compiled_char(spec: &DeviceSpec, s: &KernelShape) -> Option<KernelChar> {
    shape_char(spec, s, s.regs_per_block)
}

fn shape_char(spec: &DeviceSpec, s: &KernelShape, regs_per_block: u32) -> Option<KernelChar> {
    let curve = (1..=s.curve_len() as u32).map(|k| s.exec_ns(k)).collect();
    KernelChar::new(
        &limits(spec),
        s.blocks,
        s.threads_per_block,
        s.lds_per_block,
        regs_per_block,
        curve,
    )
}

/// Whether kernel `k` is a compiled one, timed by the simulator's cost
/// model (the condition of `reef_sim::KernelShape::from_model`).
fn is_compiled(k: &reef_model::Kernel) -> bool {
    k.profile.is_none() && k.work.is_some()
}

/// The padding table of a run's models: from their schedules
/// ([`reef_sched::dkp::table::kernel_char`], the function the daemon can use
/// too), except compiled kernels, whose block cost is the simulator's cost
/// model and which take their profile from their kernel shape
/// ([`compiled_char`]); a synthetic model without a schedule (only
/// simulator shapes, e.g. `reef-bench preempt`) from its shapes.
pub fn table<M: ModelShapes>(
    spec: &DeviceSpec,
    models: &[M],
    variant: Variant,
) -> anyhow::Result<DkpTable> {
    let (l, c) = (limits(spec), block_cost(spec));
    let mut all = Vec::with_capacity(models.len());
    for m in models {
        let (model, shapes) = (m.model(), m.shapes());
        let ks = if model.kernels.len() == shapes.len() {
            (0..shapes.len())
                .map(|i| {
                    if is_compiled(&model.kernels[i]) {
                        compiled_char(spec, &shapes[i]).ok_or_else(|| {
                            anyhow::anyhow!("{}: kernel {} does not fit a CU", m.name(), i)
                        })
                    } else {
                        reef_sched::dkp::table::kernel_char(&l, &c, model, i)
                            .map_err(anyhow::Error::from)
                    }
                })
                .collect::<anyhow::Result<Vec<_>>>()?
        } else {
            shapes
                .iter()
                .map(|s| {
                    kernel_char(spec, s).ok_or_else(|| {
                        anyhow::anyhow!("{}: kernel {} does not fit a CU", m.name(), s.name)
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?
        };
        all.push(ks);
    }
    Ok(DkpTable::new(
        Selector::new(l),
        all,
        variant,
        spec.min_block_ns,
    ))
}

/// Reads and writes of a launch (value tracking).
pub type Buffers = (Vec<BufferId>, Vec<BufferId>);

/// The scheduler of a run: the plain core, or the core with padding.
pub enum RunSched {
    Plain(Box<Scheduler>),
    Padded(Box<PaddingScheduler>),
    /// `aker`, `baymax`, `tacker` (Aker §8.3, §9.3): their launches go to
    /// the first stream; fused ones are executed by [`aker::FuseExec`].
    Aker(Box<reef_sched::aker::AkerScheduler>),
}

impl RunSched {
    /// The scheduler for `policy` (any name [`reef_sched::policy_by_name`]
    /// knows, or `reef` / `reef-dkp-mv`), with the executor of its padded
    /// launches when the policy pads. `window`: real-time kernels the DKP
    /// transmitter keeps on the device (the device-queue capacity).
    #[allow(clippy::too_many_arguments)]
    pub fn new<M: ModelShapes>(
        policy: &str,
        spec: &DeviceSpec,
        models: &[M],
        cfg: Config,
        infos: Vec<ModelInfo>,
        clients: Vec<ClientSpec>,
        window: usize,
    ) -> anyhow::Result<(RunSched, Option<PadExec>)> {
        // reef-max with padding (issue 28, `reef_sched::dkp::max`): the
        // table for its variant, the selector with its waves switch.
        if let Some(m) = reef_sched::dkp::MaxConfig::parse(policy).filter(|m| m.pad) {
            let v = if m.mv {
                Variant::MultiVersion
            } else {
                Variant::Single
            };
            let mut t = table(spec, models, v)?;
            let share = if m.share {
                reef_sched::dkp::share::BUDGET_PERMILLE
            } else {
                0
            };
            t.selector = t.selector.clone().with_waves(m.waves).with_share(share);
            let table = Arc::new(t);
            let s = PaddingScheduler::reef_max(m, table.clone(), cfg, infos, clients, window)?;
            return Ok((
                RunSched::Padded(Box::new(s)),
                Some(PadExec::new(spec, table)),
            ));
        }
        Ok(match reef_sched::dkp::variant_of(policy) {
            Some(v) => {
                let table = Arc::new(table(spec, models, v)?);
                let s = PaddingScheduler::new(v, table.clone(), cfg, infos, clients, window)?;
                (
                    RunSched::Padded(Box::new(s)),
                    Some(PadExec::new(spec, table)),
                )
            }
            None => {
                let policy = reef_sched::policy_by_name(policy)?;
                (
                    RunSched::Plain(Box::new(Scheduler::new(policy, cfg, infos, clients)?)),
                    None,
                )
            }
        })
    }

    /// The scheduler for `aker`, `baymax` or `tacker`
    /// ([`reef_sched::aker::AKER_POLICIES`]) with the predictor `pred`
    /// (profiles on `spec`, [`aker::SimPredictor`]) and QoS settings
    /// `acfg`, and the executor of its fused launches.
    pub fn new_aker(
        policy: &str,
        pred: aker::SimPredictor,
        acfg: reef_sched::aker::AkerConfig,
        cfg: Config,
        infos: Vec<ModelInfo>,
        clients: Vec<ClientSpec>,
    ) -> anyhow::Result<(RunSched, aker::FuseExec)> {
        let Some(m) = reef_sched::aker::Manager::of_name(policy) else {
            anyhow::bail!(
                "{policy} is not one of {}",
                reef_sched::aker::AKER_POLICIES.join(", ")
            );
        };
        let s = reef_sched::aker::AkerScheduler::new(m, acfg, Box::new(pred), cfg, infos, clients)?;
        Ok((RunSched::Aker(Box::new(s)), aker::FuseExec::default()))
    }

    /// The preemption core's scheduler (inside the padding one, if any).
    pub fn scheduler(&self) -> &Scheduler {
        match self {
            RunSched::Plain(s) => s,
            RunSched::Padded(s) => s.inner(),
            RunSched::Aker(s) => s.inner(),
        }
    }

    /// Whether real-time kernel `tag`, on the device now, went unpadded
    /// because the padding selection admitted none of the best-effort
    /// tasks offered ([`PaddingScheduler::refused_by_selection`]); false
    /// without padding.
    pub fn refused_by_selection(&self, tag: reef_sched::KernelTag) -> bool {
        match self {
            RunSched::Padded(s) => s.refused_by_selection(tag),
            _ => false,
        }
    }

    /// The Aker manager's figures (`aker`, `baymax`, `tacker`).
    pub fn aker_stats(&self) -> Option<reef_sched::aker::AkerStats> {
        match self {
            RunSched::Aker(s) => Some(s.stats()),
            _ => None,
        }
    }

    /// The padding figures of a run: `pad`'s own (launch timings, CU time)
    /// with the padding module's counters.
    pub fn pad_stats(&self, pad: &PadExec) -> PadStats {
        let mut st = pad.stats.clone();
        if let RunSched::Padded(d) = self {
            let c = d.dkp_counters();
            st.rt_launches = c.rt_launches;
            st.padded_launches = c.padded_launches;
            st.be_blocks_padded = c.be_blocks_padded;
            st.be_kernels_completed_by_padding = c.be_kernels_completed;
            st.rest_launches = c.rest_launches;
            st.reset_waits = c.reset_waits;
        }
        st
    }

    /// Rehearses the padding selection of the next real-time request's
    /// first kernel, changing nothing
    /// ([`PaddingScheduler::rehearse`]); nothing to do without padding.
    pub fn rehearse(&mut self) {
        if let RunSched::Padded(s) = self {
            s.rehearse();
        }
    }

    pub fn handle(&mut self, now: Time, ev: Event) {
        match self {
            RunSched::Plain(s) => s.handle(now, ev),
            RunSched::Padded(s) => s.handle(now, ev),
            RunSched::Aker(s) => s.handle(now, ev),
        }
    }
    pub fn poll(&mut self) -> Option<DkpAction> {
        match self {
            RunSched::Plain(s) => s.poll_action().map(DkpAction::Core),
            RunSched::Padded(s) => s.poll_action(),
            RunSched::Aker(s) => s.poll_action(),
        }
    }
    pub fn counters(&self) -> Counters {
        match self {
            RunSched::Plain(s) => s.counters(),
            RunSched::Padded(s) => s.counters(),
            RunSched::Aker(s) => s.counters(),
        }
    }
    pub fn preemptions(&self) -> &[PreemptionRecord] {
        match self {
            RunSched::Plain(s) => s.preemptions(),
            RunSched::Padded(s) => s.preemptions(),
            RunSched::Aker(s) => s.preemptions(),
        }
    }
    /// The number of the first record [`RunSched::preemptions`] returns.
    pub fn preemptions_base(&self) -> usize {
        match self {
            RunSched::Plain(s) => s.core().preemptions_base(),
            RunSched::Padded(s) => s.inner().core().preemptions_base(),
            RunSched::Aker(s) => s.core().preemptions_base(),
        }
    }
    /// See [`reef_sched::Core::forget_finished_preemptions`].
    pub fn forget_finished_preemptions(&mut self) {
        match self {
            RunSched::Plain(s) => s.forget_finished_preemptions(),
            RunSched::Padded(s) => s.forget_finished_preemptions(),
            RunSched::Aker(s) => s.forget_finished_preemptions(),
        }
    }
}

/// Padding figures of one run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PadStats {
    pub rt_launches: u64,
    pub padded_launches: u64,
    pub be_blocks_padded: u64,
    pub be_kernels_completed_by_padding: u64,
    pub rest_launches: u64,
    /// Real-time requests whose first kernel waited for a best-effort
    /// task's reset (`DkpCounters::reset_waits`).
    pub reset_waits: u64,
    /// Per padded launch: its duration (real-time part start to the last
    /// part's completion) minus the real-time kernel's stand-alone
    /// execution time, ns (Fig. 27).
    pub overhead_ns: Vec<i64>,
    /// CU·ns of real-time parts and of best-effort parts of padded
    /// launches, and of all real-time kernels' whole-device time.
    pub rt_cu_ns: u128,
    pub be_cu_ns: u128,
    pub device_cu_ns: u128,
}

struct Pending {
    tag: KernelTag,
    rt_ns: u64,
    rt_cus: u32,
    be_cus: u32,
    /// Parts not yet finished (completed, evicted, cleared or killed).
    parts_left: usize,
    /// How the parts that finished ended: the worst outcome is reported.
    killed: bool,
    evicted: bool,
    started: Option<Time>,
    /// The real-time stream's sim id and the real-time part's launch id.
    s0: reef_sim::StreamId,
    rt: LaunchId,
}

/// Executes padded launches on the simulator (REEF §5.1, Fig. 12; see the
/// module doc).
pub struct PadExec {
    table: Arc<DkpTable>,
    spec: DeviceSpec,
    /// Padded launches by the launch id of their real-time part.
    pending: HashMap<LaunchId, Pending>,
    /// Every part's launch id (real-time part included) → real-time part's.
    part_of: HashMap<LaunchId, LaunchId>,
    shapes: HashMap<(u32, u32, u16, u32, u32), Arc<KernelShape>>,
    /// Whether `stats.overhead_ns` records each padded launch.
    keep_overhead: bool,
    pub stats: PadStats,
}

impl PadExec {
    pub fn new(spec: &DeviceSpec, table: Arc<DkpTable>) -> Self {
        Self {
            table,
            spec: spec.clone(),
            pending: HashMap::new(),
            part_of: HashMap::new(),
            shapes: HashMap::new(),
            keep_overhead: true,
            stats: PadStats::default(),
        }
    }

    /// Whether to record every padded launch's overhead in
    /// `stats.overhead_ns` (the default; a benchmark reports its
    /// distribution, Fig. 27). A long-running user such as the daemon turns
    /// it off: the samples grow by 8 bytes per padded launch, thousands per
    /// second under load. The other figures are counters and stay.
    pub fn keep_overhead_samples(mut self, keep: bool) -> Self {
        self.keep_overhead = keep;
        self
    }

    /// The shape of version `v` of kernel `k` of model `m`, with the given
    /// per-thread register allocation (0: its own) and shared memory.
    fn shape(
        &mut self,
        base: &Arc<KernelShape>,
        m: u32,
        k: u32,
        v: u16,
        regs_per_thread: u32,
        lds: Option<u32>,
    ) -> anyhow::Result<Arc<KernelShape>> {
        let c = &self.table.kernels[m as usize][k as usize][v as usize];
        let regs = if regs_per_thread == 0 {
            c.regs_per_block
        } else {
            // Per lane, for whole waves (as the selection sized it).
            limits(&self.spec).block_registers(regs_per_thread, c.threads)
        };
        let lds = lds.unwrap_or(c.lds);
        if v == 0 && regs == base.regs_per_block && lds == base.lds_per_block {
            return Ok(base.clone());
        }
        let key = (m, k, v, regs, lds);
        if let Some(s) = self.shapes.get(&key) {
            return Ok(s.clone());
        }
        // Version 0 is the kernel itself with another allocation: its
        // blocks take the time they take unpadded at each co-residency
        // (REEF §5.2, Fig. 13: a kernel's per-block latency by co-resident
        // blocks), the base shape's own curve (measured, or the cost model
        // of a compiled kernel's work at its own resources); the padded
        // launch's registers only limit how many are co-resident. Other
        // versions (§5.3) take the table's derived curve.
        let curve = if v == 0 {
            (1..=base.curve_len() as u32)
                .map(|k| base.exec_ns(k))
                .collect()
        } else {
            c.curve().to_vec()
        };
        let mut s = KernelShape::synthetic(
            &format!("{} v{v}", base.name),
            c.blocks,
            c.threads,
            lds,
            regs,
            curve,
            &self.spec,
        )
        .map_err(|e| anyhow::anyhow!("derived shape: {e}"))?;
        // Same computation, same outputs: value tracking sees one kernel.
        s.identity = base.identity;
        let s = Arc::new(s);
        self.shapes.insert(key, s.clone());
        Ok(s)
    }

    /// Launches a padded launch on real-time stream `s0` as one
    /// [`Device::launch_padded`]. `be_shape(part)` gives a part's default
    /// kernel shape; `be_buffers(part)` its reads and writes (empty when
    /// values are not tracked).
    #[allow(clippy::too_many_arguments)]
    pub fn launch(
        &mut self,
        dev: &mut dyn Device,
        s0: reef_sim::StreamId,
        p: PaddedLaunch,
        rt_base: &Arc<KernelShape>,
        be_shape: &dyn Fn(&reef_sched::dkp::BePart) -> Arc<KernelShape>,
        rt_buffers: Buffers,
        be_buffers: &dyn Fn(&reef_sched::dkp::BePart) -> Buffers,
    ) -> anyhow::Result<std::time::Instant> {
        let k = p.tag.kernel;
        let rt_ns = self.table.kernels[p.model.0 as usize][k as usize][0].kernel_ns;
        let rt_shape = self.shape(rt_base, p.model.0, k, 0, p.regs_per_thread, Some(p.lds))?;
        // Parts beside the real-time blocks on its own CUs (`reef-max`'s
        // `share`, `reef_sched::dkp::share`) are placed before it: the
        // simulator times a block when it is placed and does not re-time
        // it when others arrive (docs/simulator.md "Blocks"), so the
        // real-time blocks, placed after them, are charged the
        // co-residency they share the CU at. Each gets `per_cu` persistent
        // slots per CU, the co-residency the selection predicted.
        let mut shared = Vec::new();
        let mut parts = Vec::with_capacity(1 + p.parts.len());
        parts.push(
            KernelLaunch::new(
                rt_shape,
                Tags {
                    task: p.tag.req.0,
                    kernel: k,
                    user: 0,
                },
            )
            .with_buffers(rt_buffers.0, rt_buffers.1)
            .with_cus(CuSet::range(0, p.rt_cus as usize)),
        );
        let mut be_cus = 0;
        for part in &p.parts {
            let base = be_shape(part);
            let shape = self.shape(
                &base,
                part.model.0,
                part.tag.kernel,
                part.version,
                p.regs_per_thread,
                Some(p.lds),
            )?;
            let (r, w) = be_buffers(part);
            be_cus += part.cus.len() as u32;
            let mut l = KernelLaunch::new(
                shape,
                Tags {
                    task: part.tag.req.0,
                    kernel: part.tag.kernel,
                    user: 1,
                },
            )
            .with_buffers(r, w)
            .with_blocks(part.blocks.clone())
            .with_cus(CuSet::range(part.cus.start as usize, part.cus.end as usize));
            // More blocks than slots (`reef-max`'s waves): the dkp kernel's
            // best-effort threads loop over them, `per_cu` slots per CU.
            let beside_rt = part.cus.start < p.rt_cus;
            if beside_rt || part.blocks.len() as u64 > part.cus.len() as u64 * part.per_cu as u64 {
                l.persistent = Some(part.per_cu);
            }
            if beside_rt {
                shared.push(l);
            } else {
                parts.push(l);
            }
        }
        let rt_at = shared.len();
        if rt_at > 0 {
            shared.append(&mut parts);
            parts = shared;
        }
        // When the launch, built, is issued to the device queue: a live
        // daemon's control path ends here (a wall-clock reading for
        // measurement only; nothing depends on it).
        let issued = std::time::Instant::now();
        let ids = device::launch_parts(dev, s0, parts).map_err(anyhow::Error::msg)?;
        let rt = ids[rt_at];
        for &id in &ids {
            self.part_of.insert(id, rt);
        }
        self.pending.insert(
            rt,
            Pending {
                tag: p.tag,
                rt_ns,
                rt_cus: p.rt_cus,
                be_cus,
                parts_left: ids.len(),
                killed: false,
                evicted: false,
                started: None,
                s0,
                rt,
            },
        );
        Ok(issued)
    }

    /// Launches the rest of a partly padded kernel on its own stream.
    pub fn rest(
        &mut self,
        base: &Arc<KernelShape>,
        model: u32,
        version: u16,
        tags: Tags,
        blocks: std::ops::Range<u32>,
    ) -> anyhow::Result<KernelLaunch> {
        let shape = self.shape(base, model, tags.kernel, version, 0, None)?;
        Ok(KernelLaunch::new(shape, tags).with_blocks(blocks))
    }

    /// Filters a device event. Events of plain launches pass. Of a padded
    /// launch's parts, the real-time part's start passes; the launch is
    /// reported once, as the real-time kernel, when its last part has
    /// finished: killed if any part was killed, else evicted if any part
    /// was evicted or cleared, else completed.
    pub fn filter(&mut self, ev: &DeviceEvent) -> Option<DeviceEvent> {
        let Some(&rt) = self.part_of.get(&ev.launch) else {
            return Some(*ev);
        };
        let p = self.pending.get_mut(&rt)?;
        match ev.kind {
            EventKind::Started => {
                if ev.launch != rt {
                    return None;
                }
                p.started = Some(ev.time);
                return Some(*ev);
            }
            EventKind::Completed => {}
            EventKind::Evicted | EventKind::Cleared => p.evicted = true,
            EventKind::Killed { .. } => p.killed = true,
        }
        self.part_of.remove(&ev.launch);
        p.parts_left -= 1;
        if p.parts_left > 0 {
            return None;
        }
        let p = self.pending.remove(&rt)?;
        Some(self.finish(p, ev.time))
    }

    fn finish(&mut self, p: Pending, t: Time) -> DeviceEvent {
        let kind = if p.killed {
            // Blocks done are not meaningful for a padded launch as a whole.
            EventKind::Killed { blocks_done: 0 }
        } else if p.evicted {
            EventKind::Evicted
        } else {
            EventKind::Completed
        };
        if let (EventKind::Completed, Some(s)) = (kind, p.started) {
            let n = self.spec.compute_units as u128;
            let d = t - s;
            if self.keep_overhead {
                self.stats.overhead_ns.push(d as i64 - p.rt_ns as i64);
            }
            self.stats.rt_cu_ns += p.rt_cus as u128 * d as u128;
            self.stats.be_cu_ns += p.be_cus as u128 * d as u128;
            self.stats.device_cu_ns += n * d as u128;
        }
        DeviceEvent {
            time: t,
            stream: p.s0,
            launch: p.rt,
            tags: Tags {
                task: p.tag.req.0,
                kernel: p.tag.kernel,
                user: 0,
            },
            kind,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reef_sim::Sim;

    fn models(spec: &DeviceSpec, names: &[&str]) -> Vec<PreparedModel> {
        let dir = reef_model::default_models_dir();
        names
            .iter()
            .map(|n| {
                let model = reef_model::load_named(&dir, n).unwrap();
                let shapes = KernelShape::for_model(&model, spec).unwrap();
                PreparedModel {
                    name: n.to_string(),
                    model,
                    shapes,
                }
            })
            .collect()
    }

    #[test]
    fn grid_limited_curves_carry_no_register_demand() {
        let spec = DeviceSpec::preset("mi50").unwrap();
        let ms = models(&spec, &["resnet152"]);
        let shapes = &ms[0].shapes;
        // The softmax: one block, a one-point curve.
        let one = shapes.iter().find(|s| s.blocks == 1).unwrap();
        let k = kernel_char(&spec, one).unwrap();
        assert_eq!(k.regs_per_block, 0);
        assert!(k.occupancy > 1);
        // A kernel whose curve is shorter than its grid keeps the inference.
        let big = shapes
            .iter()
            .find(|s| (s.curve_len() as u32) < s.blocks)
            .unwrap();
        let k = kernel_char(&spec, big).unwrap();
        assert_eq!(k.regs_per_block, big.regs_per_block);
    }

    #[test]
    fn schedule_only_table_equals_the_simulated_shapes() {
        // The table any caller builds from the schedules alone is exactly
        // what the simulator executes, on a device with measured profiles
        // and on one with the cost model.
        for dev in ["mi50", "gv100"] {
            let spec = DeviceSpec::preset(dev).unwrap();
            let ms = models(
                &spec,
                &["resnet152", "vgg", "densenet", "inception", "bert"],
            );
            let t = table(&spec, &ms, Variant::Single).unwrap();
            for (m, ks) in ms.iter().zip(&t.kernels) {
                assert_eq!(ks.len(), m.shapes.len());
                for (s, v) in m.shapes.iter().zip(ks) {
                    assert_eq!(
                        Some(&v[0]),
                        kernel_char(&spec, s).as_ref(),
                        "{dev} {}",
                        s.name
                    );
                }
            }
        }
    }

    /// A padded launch of an RT resnet152 kernel of fewer blocks than CUs
    /// (long enough to pad) with the first vgg kernel: (table, models, RT
    /// kernel index, the launch).
    fn padded_fixture(
        spec: &DeviceSpec,
    ) -> (Arc<DkpTable>, Vec<PreparedModel>, usize, PaddedLaunch) {
        use reef_sched::dkp::BePart;
        use reef_sched::{ClientId, KernelTag, ModelId, RequestId, StreamId};
        let ms = models(spec, &["resnet152", "vgg"]);
        let t = Arc::new(table(spec, &ms, Variant::Single).unwrap());
        let (rk, rc) = t.kernels[0]
            .iter()
            .enumerate()
            .map(|(i, v)| (i, &v[0]))
            .find(|(_, c)| c.blocks < 40 && c.kernel_ns > 20_000)
            .unwrap();
        let bc = &t.kernels[1][0][0];
        assert!(bc.block_ns(1) < rc.kernel_ns);
        let rt_cus = rc.blocks;
        let p = PaddedLaunch {
            stream: StreamId(0),
            tag: KernelTag {
                req: RequestId(1),
                kernel: rk as u32,
            },
            model: ModelId(0),
            rt_cus,
            proxy_level: 8,
            regs_per_thread: 32,
            lds: rc.lds.max(bc.lds),
            parts: vec![BePart {
                stream: StreamId(1),
                client: ClientId(1),
                model: ModelId(1),
                tag: KernelTag {
                    req: RequestId(2),
                    kernel: 0,
                },
                version: 0,
                blocks: 0..bc.blocks.min(60 - rt_cus),
                cus: rt_cus..60,
                per_cu: 1,
            }],
        };
        (t, ms, rk, p)
    }

    fn launch_fixture(
        px: &mut PadExec,
        sim: &mut Sim,
        s0: reef_sim::StreamId,
        ms: &[PreparedModel],
        p: PaddedLaunch,
    ) {
        let rt_base = ms[0].shapes[p.tag.kernel as usize].clone();
        px.launch(
            sim,
            s0,
            p,
            &rt_base,
            &|part| ms[part.model.0 as usize].shapes[part.tag.kernel as usize].clone(),
            (Vec::new(), Vec::new()),
            &|_| (Vec::new(), Vec::new()),
        )
        .unwrap();
    }

    #[test]
    fn padded_parts_start_together_with_the_rt_part_on_their_cus() {
        use reef_sim::SimConfig;
        let spec = DeviceSpec::preset("mi50").unwrap();
        let (t, ms, rk, p) = padded_fixture(&spec);
        let rc = &t.kernels[0][rk][0];
        let rt_cus = p.rt_cus;
        let mut sim = Sim::new(
            spec.clone(),
            SimConfig {
                record_blocks: true,
                ..SimConfig::default()
            },
        );
        let s0 = sim.create_stream(0, 64).unwrap();
        let mut px = PadExec::new(&spec, t.clone());
        // A plain RT launch ahead of the padded one.
        let tags = Tags {
            task: 1,
            kernel: 0,
            user: 0,
        };
        sim.launch(s0, KernelLaunch::new(ms[0].shapes[0].clone(), tags))
            .unwrap();
        launch_fixture(&mut px, &mut sim, s0, &ms, p);
        let mut seen = Vec::new();
        while let Some((_, evs)) = sim.step() {
            for e in evs {
                if let Some(f) = px.filter(&e) {
                    seen.push((f.tags.kernel, f.kind, f.time, f.tags.user));
                }
            }
        }
        // Only RT-tagged events reach the scheduler: the plain launch's
        // start and completion, the padded launch's start and completion.
        assert_eq!(seen.len(), 4, "{seen:?}");
        assert!(seen.iter().all(|e| e.3 == 0));
        let at = |k: u32, kind: EventKind| {
            seen.iter()
                .find(|e| e.0 == k && e.1 == kind)
                .map(|e| e.2)
                .unwrap()
        };
        let plain_done = at(0, EventKind::Completed);
        let rt_start = at(rk as u32, EventKind::Started);
        let done = at(rk as u32, EventKind::Completed);
        // The padded launch (fetched meanwhile) is dispatched right after
        // the plain one, as one kernel.
        assert_eq!(rt_start, plain_done + spec.cp_dispatch_ns);
        // BE blocks start with the RT blocks, on the CUs left over; RT
        // blocks stay on theirs.
        let recs = sim.block_records();
        let be_first = recs
            .iter()
            .filter(|r| r.start >= rt_start && r.cus.iter().all(|c| c >= rt_cus as usize))
            .map(|r| r.start)
            .min()
            .unwrap();
        assert_eq!(be_first, rt_start);
        assert!(recs.iter().filter(|r| r.start >= rt_start).all(|r| r
            .cus
            .iter()
            .all(|c| c >= rt_cus as usize)
            || r.cus.iter().all(|c| c < rt_cus as usize)));
        // Rule 1 held: the padded launch lasted as long as the RT kernel.
        assert_eq!(px.stats.overhead_ns, vec![0]);
        assert_eq!(done - rt_start, rc.kernel_ns);
    }

    #[test]
    fn a_part_beside_the_rt_blocks_is_placed_first_and_slows_them() {
        // `reef-max`'s `share`: a BE part on the RT kernel's own CUs. The
        // simulator times a block when it is placed, so the part goes
        // first and the RT blocks are charged the co-residency.
        use reef_sim::SimConfig;
        let spec = DeviceSpec::preset("mi50").unwrap();
        let (t, ms, _, mut p) = padded_fixture(&spec);
        // An RT kernel of fewer blocks than CUs whose blocks are slower
        // two to a CU than alone.
        let (rk, rc) = t.kernels[0]
            .iter()
            .enumerate()
            .map(|(i, v)| (i, &v[0]))
            .find(|(i, c)| {
                let s = &ms[0].shapes[*i];
                c.blocks < 40 && c.kernel_ns > 20_000 && s.exec_ns(2) > s.exec_ns(1) * 21 / 20
            })
            .unwrap();
        p.tag.kernel = rk as u32;
        p.rt_cus = rc.blocks;
        p.lds = rc.lds.max(t.kernels[1][0][0].lds);
        p.parts[0].cus = 0..rc.blocks;
        p.parts[0].blocks = 0..rc.blocks;
        let mut sim = Sim::new(
            spec.clone(),
            SimConfig {
                record_blocks: true,
                ..SimConfig::default()
            },
        );
        let s0 = sim.create_stream(0, 64).unwrap();
        let mut px = PadExec::new(&spec, t.clone());
        launch_fixture(&mut px, &mut sim, s0, &ms, p);
        let mut seen = Vec::new();
        while let Some((_, evs)) = sim.step() {
            for e in evs {
                if let Some(f) = px.filter(&e) {
                    seen.push((f.tags.kernel, f.kind, f.time, f.tags.user));
                }
            }
        }
        // Reported once, as the RT kernel.
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(seen.iter().all(|e| e.0 == rk as u32 && e.3 == 0));
        let (start, done) = (seen[0].2, seen[1].2);
        // One BE block beside each RT block: the RT blocks take longer
        // than alone (at least the curve at two blocks per CU when the
        // kernels' demands are alike; the resource mix may charge less).
        assert!(
            done - start > rc.kernel_ns,
            "{} vs {}",
            done - start,
            rc.kernel_ns
        );
        let recs = sim.block_records();
        assert!(recs
            .iter()
            .all(|r| r.cus.iter().all(|c| c < rc.blocks as usize)));
    }

    #[test]
    fn killed_or_evicted_padded_launches_are_reported_once_as_the_rt_kernel() {
        use reef_sim::SimConfig;
        let spec = DeviceSpec::preset("mi50").unwrap();
        let (t, ms, rk, p) = padded_fixture(&spec);
        for kill in [true, false] {
            let mut sim = Sim::new(spec.clone(), SimConfig::default());
            let s0 = sim.create_stream(1, 64).unwrap();
            let mut px = PadExec::new(&spec, t.clone());
            if !kill {
                sim.set_preempt_flag(s0, true).unwrap();
            }
            launch_fixture(&mut px, &mut sim, s0, &ms, p.clone());
            let mut seen = Vec::new();
            let mut killed = false;
            while let Some((_, evs)) = sim.step() {
                for e in evs {
                    if let Some(f) = px.filter(&e) {
                        if kill && f.kind == EventKind::Started && !killed {
                            sim.kill_stream(s0).unwrap();
                            killed = true;
                        }
                        seen.push((f.tags.task, f.tags.kernel, f.kind));
                    }
                }
            }
            let last = *seen.last().unwrap();
            assert_eq!((last.0, last.1), (1, rk as u32));
            if kill {
                assert_eq!(seen.len(), 2, "{seen:?}");
                assert!(matches!(last.2, EventKind::Killed { .. }));
            } else {
                assert_eq!(seen, vec![(1, rk as u32, EventKind::Evicted)]);
            }
            assert!(px.pending.is_empty() && px.part_of.is_empty());
            assert!(px.stats.overhead_ns.is_empty());
        }
    }
}

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
mod pad;
mod parts;
pub use pad::{PadExec, PadStats};

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
            t.selector = t
                .selector
                .clone()
                .with_waves(m.waves)
                .with_most(m.most)
                .with_spread(m.spread)
                .with_rate(m.rate)
                .with_share(share)
                .with_chain(m.chain.then(|| pad::barrier_ns(spec)));
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
            st.guard_held = c.guard_held;
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

    /// Makes the padding selection for the next real-time kernel ahead of
    /// its launch ([`PaddingScheduler::prepare`]); true when one ran.
    pub fn prepare(&mut self) -> bool {
        match self {
            RunSched::Padded(s) => s.prepare(),
            _ => false,
        }
    }

    /// How the selections made ahead fared; `None` without padding.
    pub fn ahead_counts(&self) -> Option<reef_sched::dkp::padded::AheadCounts> {
        match self {
            RunSched::Padded(s) => Some(s.ahead_counts()),
            _ => None,
        }
    }

    /// Selects ahead of the launch or only at it (the decisions are the
    /// same; [`PaddingScheduler::set_select_ahead`]).
    pub fn set_select_ahead(&mut self, on: bool) {
        if let RunSched::Padded(s) = self {
            s.set_select_ahead(on);
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

#[cfg(test)]
mod tests;

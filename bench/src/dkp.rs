//! `reef-bench dkp`: dynamic kernel padding (REEF §5) on the simulated GPU,
//! and the execution of padded launches for the DISB runner.
//!
//! - `--selection`: kernel selection time per real-time kernel with one and
//!   with five best-effort clients of ten versions each (§6.5 "Kernel
//!   selection", Fig. 26: 0.4 µs with one BE client, 1.2 µs with several).
//! - default: the pairwise experiment of §6.5 (Fig. 23): one real-time and
//!   one best-effort client, both closed-loop, for every ordered pair of the
//!   five models, under GPU streams, DKP (`reef`) and DKP-MV
//!   (`reef-dkp-mv`), with `reef-nodkp` as the padding-free reference; the
//!   CU usage of Fig. 24 and the padded real-time kernel overhead of Fig. 27.
//!
//! Padded launches on the simulator (Fig. 12): one [`Sim::launch_padded`]
//! on the real-time stream, part 0 the real-time kernel on CUs `0..rt_cus`,
//! then one part per best-effort task on its CU range and block range; all
//! parts take the padded launch's resource demand (the proxy kernel's
//! registers per thread and the largest shared memory) through derived
//! kernel shapes. The parts share one device-queue slot, one fetch and one
//! dispatch and start together, so rule 1 needs no launch skew. The padded
//! launch is reported to the scheduler as the real-time kernel: started when
//! its real-time part starts, completed (or evicted, or killed) once every
//! part has finished.

use crate::disb::runner::{self, ClientPlan, Gen, PreparedModel, RunOptions};
use anyhow::{bail, Result};
use reef_sched::dkp::{
    BlockCost, Candidate, DeviceLimits, DkpAction, DkpTable, KernelChar, PaddedLaunch, Padding,
    PaddingScheduler, Selector, Variant,
};
use reef_sched::{Class, Counters, Event, PreemptionRecord, Scheduler, Time};
use reef_sim::{
    BufferId, CuSet, DeviceEvent, DeviceSpec, EventKind, KernelLaunch, KernelShape, LaunchId, Sim,
    Tags,
};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

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
    let curve = (1..=s.curve_len() as u32).map(|k| s.exec_ns(k)).collect();
    let grid_limited = s.curve_len() as u64 >= s.blocks as u64;
    KernelChar::new(
        &limits(spec),
        s.blocks,
        s.threads_per_block,
        s.lds_per_block,
        if grid_limited { 0 } else { s.regs_per_block },
        curve,
    )
}

/// The padding table of a run's models: from their schedules
/// ([`reef_sched::dkp::table::kernel_char`], the function the daemon can use
/// too); a synthetic model without a schedule (only simulator shapes, e.g.
/// `reef-bench preempt`) from its shapes.
pub fn table(spec: &DeviceSpec, models: &[PreparedModel], variant: Variant) -> Result<DkpTable> {
    let (l, c) = (limits(spec), block_cost(spec));
    let mut all = Vec::with_capacity(models.len());
    for m in models {
        let ks = if m.model.kernels.len() == m.shapes.len() {
            (0..m.shapes.len())
                .map(|i| reef_sched::dkp::table::kernel_char(&l, &c, &m.model, i))
                .collect::<Result<Vec<_>, _>>()?
        } else {
            m.shapes
                .iter()
                .map(|s| {
                    kernel_char(spec, s).ok_or_else(|| {
                        anyhow::anyhow!("{}: kernel {} does not fit a CU", m.name, s.name)
                    })
                })
                .collect::<Result<Vec<_>>>()?
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

/// The scheduler of a DISB run: the plain core, or the core with padding.
pub enum RunSched {
    Plain(Box<Scheduler>),
    Padded(Box<PaddingScheduler>),
}

impl RunSched {
    pub fn handle(&mut self, now: Time, ev: Event) {
        match self {
            RunSched::Plain(s) => s.handle(now, ev),
            RunSched::Padded(s) => s.handle(now, ev),
        }
    }
    pub fn poll(&mut self) -> Option<DkpAction> {
        match self {
            RunSched::Plain(s) => s.poll_action().map(DkpAction::Core),
            RunSched::Padded(s) => s.poll_action(),
        }
    }
    pub fn counters(&self) -> Counters {
        match self {
            RunSched::Plain(s) => s.counters(),
            RunSched::Padded(s) => s.counters(),
        }
    }
    pub fn preemptions(&self) -> &[PreemptionRecord] {
        match self {
            RunSched::Plain(s) => s.preemptions(),
            RunSched::Padded(s) => s.preemptions(),
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
    tag: reef_sched::KernelTag,
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

/// Executes padded launches on the simulator (see the module doc).
pub struct PadExec {
    table: Arc<DkpTable>,
    spec: DeviceSpec,
    /// Padded launches by the launch id of their real-time part.
    pending: HashMap<LaunchId, Pending>,
    /// Every part's launch id (real-time part included) → real-time part's.
    part_of: HashMap<LaunchId, LaunchId>,
    shapes: HashMap<(u32, u32, u16, u32, u32), Arc<KernelShape>>,
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
            stats: PadStats::default(),
        }
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
    ) -> Result<Arc<KernelShape>> {
        let c = &self.table.kernels[m as usize][k as usize][v as usize];
        let regs = if regs_per_thread == 0 {
            c.regs_per_block
        } else {
            regs_per_thread * c.threads
        };
        let lds = lds.unwrap_or(c.lds);
        if v == 0 && regs == base.regs_per_block && lds == base.lds_per_block {
            return Ok(base.clone());
        }
        let key = (m, k, v, regs, lds);
        if let Some(s) = self.shapes.get(&key) {
            return Ok(s.clone());
        }
        let mut s = KernelShape::synthetic(
            &format!("{} v{v}", base.name),
            c.blocks,
            c.threads,
            lds,
            regs,
            c.curve().to_vec(),
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
    /// [`Sim::launch_padded`]. `be_shape(part)` gives a part's default
    /// kernel shape; `be_buffers(part)` its reads and writes (empty when
    /// values are not tracked).
    #[allow(clippy::too_many_arguments)]
    pub fn launch(
        &mut self,
        sim: &mut Sim,
        s0: reef_sim::StreamId,
        p: PaddedLaunch,
        rt_model: &PreparedModel,
        be_shape: &dyn Fn(&reef_sched::dkp::BePart) -> Arc<KernelShape>,
        rt_buffers: Buffers,
        be_buffers: &dyn Fn(&reef_sched::dkp::BePart) -> Buffers,
    ) -> Result<()> {
        let k = p.tag.kernel;
        let rt_ns = self.table.kernels[p.model.0 as usize][k as usize][0].kernel_ns;
        let rt_shape = self.shape(
            &rt_model.shapes[k as usize],
            p.model.0,
            k,
            0,
            p.regs_per_thread,
            Some(p.lds),
        )?;
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
            parts.push(
                KernelLaunch::new(
                    shape,
                    Tags {
                        task: part.tag.req.0,
                        kernel: part.tag.kernel,
                        user: 1,
                    },
                )
                .with_buffers(r, w)
                .with_blocks(part.blocks.clone())
                .with_cus(CuSet::range(part.cus.start as usize, part.cus.end as usize)),
            );
        }
        let ids = sim.launch_padded(s0, parts)?;
        let rt = ids[0];
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
        Ok(())
    }

    /// Launches the rest of a partly padded kernel on its own stream.
    pub fn rest(
        &mut self,
        base: &Arc<KernelShape>,
        model: u32,
        version: u16,
        tags: Tags,
        blocks: std::ops::Range<u32>,
    ) -> Result<KernelLaunch> {
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
            self.stats.overhead_ns.push(d as i64 - p.rt_ns as i64);
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

// ---------------------------------------------------------------------------
// `reef-bench dkp`

/// Arguments of `reef-bench dkp`.
#[derive(clap::Args, Debug, Clone)]
pub struct DkpArgs {
    /// Only the kernel selection time benchmark.
    #[arg(long)]
    pub selection: bool,
    /// Virtual seconds per pair and policy.
    #[arg(long, default_value_t = 1.0)]
    pub duration: f64,
    /// Simulated device.
    #[arg(long, default_value = "mi50")]
    pub device: String,
    /// Comma-separated models (default: the five measured models).
    #[arg(long, default_value = "resnet152,vgg,densenet,inception,bert")]
    pub models: String,
    /// Policies of the pairwise experiment.
    #[arg(long, default_value = "streams,reef-nodkp,reef,reef-dkp-mv")]
    pub policy: String,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Worker threads (default: available cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// One JSON object per line instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Selection benchmark iterations per configuration.
    #[arg(long, default_value_t = 200_000)]
    pub iterations: u64,
    /// Sensitivity only, not the paper's setup: the real-time client waits
    /// this long (µs of virtual time) after each reply before its next
    /// request (a DISB periodic client at the stand-alone latency plus the
    /// gap), leaving the scheduler in normal mode meanwhile. 0 (default):
    /// closed loop, the next request at the reply's instant.
    #[arg(long, default_value_t = 0.0)]
    pub rt_gap_us: f64,
    /// Instead of running the pairs, say for every ordered pair and both
    /// padding variants which best-effort kernels no real-time kernel of
    /// the pair admits, and why (rule 1, rule 2, ...), from the profiles.
    #[arg(long)]
    pub explain: bool,
}

/// Selection time of one configuration.
#[derive(Debug, Clone, Serialize)]
pub struct SelectionTime {
    pub be_clients: usize,
    pub versions_per_kernel: usize,
    pub ns_per_rt_kernel: f64,
    pub padded_share: f64,
}

/// Measures the selection policy alone: for every real-time kernel of
/// `rt` (round robin), select among `clients` best-effort tasks whose
/// current kernels are drawn from `be` kernels with `versions` versions
/// each (ten from the multi-version cost model where pruning leaves ten or
/// more; cycled through the kernel list).
pub fn selection_time(
    spec: &DeviceSpec,
    rt: &PreparedModel,
    be: &PreparedModel,
    clients: usize,
    versions: usize,
    iterations: u64,
) -> Result<SelectionTime> {
    let t = table(spec, std::slice::from_ref(be), Variant::MultiVersion)?;
    let rtk: Vec<KernelChar> = rt
        .shapes
        .iter()
        .filter_map(|s| kernel_char(spec, s))
        .collect();
    // BE kernels with at least `versions` surviving versions.
    let pool: Vec<&[KernelChar]> = t.kernels[0]
        .iter()
        .filter(|v| v.len() >= versions)
        .map(|v| &v[..versions])
        .collect();
    if pool.is_empty() {
        bail!(
            "no kernel of {} has {versions} versions after pruning",
            be.name
        );
    }
    let mut out = Padding::default();
    let mut padded = 0u64;
    let mut sets: Vec<Vec<Candidate<'_>>> = Vec::new();
    for i in 0..64usize {
        sets.push(
            (0..clients)
                .map(|c| Candidate {
                    versions: pool[(i * 7 + c * 13) % pool.len()],
                    locked: None,
                    next_block: 0,
                })
                .collect(),
        );
    }
    let sel = &t.selector;
    let t0 = Instant::now();
    for i in 0..iterations as usize {
        let k = &rtk[i % rtk.len()];
        let c = &sets[i % sets.len()];
        if sel.select(std::hint::black_box(k), c, i, &mut out) {
            padded += 1;
        }
    }
    let ns = t0.elapsed().as_nanos() as f64 / iterations as f64;
    Ok(SelectionTime {
        be_clients: clients,
        versions_per_kernel: versions,
        ns_per_rt_kernel: ns,
        padded_share: padded as f64 / iterations as f64,
    })
}

/// How many real-time kernels give each verdict ([`reef_sched::dkp::Verdict::name`]).
pub type Tally = Vec<(&'static str, usize)>;

/// What the profiles say about one (RT model, BE model, variant): the
/// best-effort kernels no real-time kernel of the pair can be padded with.
#[derive(Debug, Clone, Serialize)]
pub struct Blockers {
    pub rt: String,
    pub be: String,
    pub variant: &'static str,
    /// Best-effort kernels (in inference order) that no real-time kernel
    /// admits.
    pub blocked: Vec<u32>,
    /// The first of them, with how many real-time kernels reject it for
    /// each reason (`Verdict::name`).
    pub first: Option<(u32, String, Tally)>,
    /// For the first: its shortest block (any version, alone on a CU), ns.
    pub first_min_block_ns: Option<u64>,
    /// The longest real-time kernel that leaves CUs over, ns: rule 1 needs
    /// a best-effort block shorter than this.
    pub rt_max_paddable_kernel_ns: u64,
    /// The first best-effort kernel that only real-time kernels among the
    /// first `window` of an inference admit, with their indices. Under a
    /// closed-loop real-time client those are transmitted at the start of
    /// every real-time request, while the best-effort stream still drains
    /// the launches of the instant of normal mode before it, so they are
    /// never padded and such a kernel blocks its task too.
    pub first_only_early: Option<(u32, String, Vec<u32>)>,
}

/// For every best-effort kernel of `be`, the verdict of every real-time
/// kernel of `rt` ([`Selector::explain`]); a best-effort task whose current
/// kernel no real-time kernel admits makes no progress by padding.
pub fn blockers(
    spec: &DeviceSpec,
    rt: &PreparedModel,
    be: &PreparedModel,
    variant: Variant,
) -> Result<Blockers> {
    let t = table(
        spec,
        &[clone_model(spec, rt)?, clone_model(spec, be)?],
        variant,
    )?;
    let mut blocked = Vec::new();
    let mut first = None;
    let mut first_min_block_ns = None;
    let mut first_only_early = None;
    let window = crate::run::REEF_DQ_CAPACITY as u32;
    let cus = t.selector.limits().compute_units;
    let rt_max_paddable_kernel_ns = t.kernels[0]
        .iter()
        .filter(|v| v[0].reserved_cus(cus) < cus)
        .map(|v| v[0].kernel_ns)
        .max()
        .unwrap_or(0);
    for (j, vs) in t.kernels[1].iter().enumerate() {
        let mut tally: std::collections::BTreeMap<reef_sched::dkp::Verdict, usize> =
            Default::default();
        let mut admitted = Vec::new();
        for (ri, rk) in t.kernels[0].iter().enumerate() {
            let v = t.selector.explain(&rk[0], vs);
            if v == reef_sched::dkp::Verdict::Padded {
                admitted.push(ri as u32);
            }
            *tally.entry(v).or_default() += 1;
        }
        if !admitted.is_empty() {
            if first_only_early.is_none() && admitted.iter().all(|&r| r < window) {
                first_only_early = Some((j as u32, be.shapes[j].name.clone(), admitted));
            }
            continue;
        }
        blocked.push(j as u32);
        if first.is_none() {
            first_min_block_ns = vs.iter().map(|k| k.block_ns(1)).min();
            first = Some((
                j as u32,
                be.shapes[j].name.clone(),
                tally.into_iter().map(|(v, n)| (v.name(), n)).collect(),
            ));
        }
    }
    Ok(Blockers {
        rt: rt.name.clone(),
        be: be.name.clone(),
        variant: match variant {
            Variant::Single => "reef",
            Variant::MultiVersion => "reef-dkp-mv",
        },
        blocked,
        first,
        first_min_block_ns,
        rt_max_paddable_kernel_ns,
        first_only_early,
    })
}

fn clone_model(spec: &DeviceSpec, m: &PreparedModel) -> Result<PreparedModel> {
    PreparedModel::new(m.model.clone(), spec)
}

/// One pair under one policy.
#[derive(Debug, Clone, Serialize)]
pub struct PairResult {
    pub rt: String,
    pub be: String,
    pub policy: String,
    /// Mean RT latency over the RT model's stand-alone latency.
    pub rt_latency_norm: f64,
    /// RT requests/s over the stand-alone maximum.
    pub rt_throughput_norm: f64,
    pub be_throughput_norm: f64,
    pub overall_throughput_norm: f64,
    /// Time-weighted CU shares during padded launches (Fig. 24).
    pub rt_cu_share: Option<f64>,
    pub be_cu_share: Option<f64>,
    pub padded_launches: u64,
    pub rt_launches: u64,
    pub be_blocks_padded: u64,
    pub be_kernels_completed_by_padding: u64,
    pub rest_launches: u64,
    pub be_completed: u64,
    pub overhead_ns: Vec<i64>,
}

fn run_pair(
    spec: &DeviceSpec,
    models: &[PreparedModel],
    standalone: &[f64],
    rt: usize,
    be: usize,
    policy: &str,
    args: &DkpArgs,
) -> Result<PairResult> {
    let two = vec![
        PreparedModel::new(models[rt].model.clone(), spec)?,
        PreparedModel::new(models[be].model.clone(), spec)?,
    ];
    let plans = vec![
        ClientPlan {
            name: format!("rt-{}", models[rt].name),
            model: 0,
            class: Class::RealTime,
            gen: if args.rt_gap_us > 0.0 {
                Gen::Periodic {
                    next: 0,
                    interval: (standalone[rt] + args.rt_gap_us * 1e3) as Time,
                }
            } else {
                Gen::Continuous
            },
        },
        ClientPlan {
            name: format!("be-{}", models[be].name),
            model: 1,
            class: Class::BestEffort,
            gen: Gen::Continuous,
        },
    ];
    let dur = (args.duration * 1e9) as u64;
    let out = runner::simulate(
        spec,
        &two,
        plans,
        dur,
        &RunOptions {
            policy: policy.to_string(),
            seed: args.seed,
            dq_capacity: crate::run::REEF_DQ_CAPACITY,
            track_values: false,
        },
    )?;
    let secs = dur as f64 / 1e9;
    let thr = |ci: usize, m: usize| out.clients[ci].completed as f64 / secs * standalone[m] / 1e9;
    let lat = &out.clients[0].latencies;
    let rt_latency_norm = if lat.is_empty() {
        f64::NAN
    } else {
        lat.iter().sum::<u64>() as f64 / lat.len() as f64 / standalone[rt]
    };
    let (rt_thr, be_thr) = (thr(0, rt), thr(1, be));
    let pad = out.padding.clone().unwrap_or_default();
    let share = |x: u128| (pad.device_cu_ns > 0).then(|| x as f64 / pad.device_cu_ns as f64);
    Ok(PairResult {
        rt: models[rt].name.clone(),
        be: models[be].name.clone(),
        policy: policy.to_string(),
        rt_latency_norm,
        rt_throughput_norm: rt_thr,
        be_throughput_norm: be_thr,
        overall_throughput_norm: rt_thr + be_thr,
        rt_cu_share: share(pad.rt_cu_ns),
        be_cu_share: share(pad.be_cu_ns),
        padded_launches: pad.padded_launches,
        rt_launches: pad.rt_launches,
        be_blocks_padded: pad.be_blocks_padded,
        be_kernels_completed_by_padding: pad.be_kernels_completed_by_padding,
        rest_launches: pad.rest_launches,
        be_completed: out.clients[1].completed,
        overhead_ns: pad.overhead_ns,
    })
}

fn pct(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let r = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[r.clamp(1, sorted.len()) - 1]
}

/// Entry point of `reef-bench dkp`.
pub fn main(args: DkpArgs) -> Result<()> {
    let spec = DeviceSpec::by_name_or_path(&args.device)?;
    let dir = reef_model::default_models_dir();
    let names: Vec<&str> = args.models.split(',').map(str::trim).collect();
    let mut models = Vec::new();
    for n in &names {
        models.push(PreparedModel::new(reef_model::load_named(&dir, n)?, &spec)?);
    }
    // Selection time (Fig. 26): RT resnet152 kernels, BE clients on the
    // kernels of the other models with ten versions each.
    let rt_i = 0;
    let mut sel = Vec::new();
    for clients in [1usize, 5] {
        for (bi, be) in models.iter().enumerate() {
            if bi == rt_i && models.len() > 1 {
                continue;
            }
            match selection_time(&spec, &models[rt_i], be, clients, 10, args.iterations) {
                Ok(r) => sel.push((be.name.clone(), r)),
                Err(e) => eprintln!("selection with BE {}: {e}", be.name),
            }
        }
    }
    if args.json {
        for (be, r) in &sel {
            println!(
                "{}",
                serde_json::json!({"selection": r, "rt": models[rt_i].name, "be": be})
            );
        }
    } else {
        println!(
            "kernel selection time per RT kernel (RT {}; BE kernels with 10 versions each):",
            models[rt_i].name
        );
        println!(
            "{:<10} {:>10} {:>12} {:>8}",
            "BE model", "BE clients", "ns/RT kernel", "padded"
        );
        for (be, r) in &sel {
            println!(
                "{:<10} {:>10} {:>12.0} {:>7.0}%",
                be,
                r.be_clients,
                r.ns_per_rt_kernel,
                100.0 * r.padded_share
            );
        }
    }
    // Multi-version candidates per kernel after dominance pruning (§5.3).
    for m in &models {
        let t = table(&spec, std::slice::from_ref(m), Variant::MultiVersion)?;
        let n: Vec<usize> = t.kernels[0].iter().map(|v| v.len()).collect();
        let ten = n.iter().filter(|&&x| x >= 10).count();
        if args.json {
            println!(
                "{}",
                serde_json::json!({"versions": m.name, "kernels": n.len(),
                    "min": n.iter().min(), "max": n.iter().max(),
                    "mean": n.iter().sum::<usize>() as f64 / n.len() as f64, "with_ten": ten})
            );
        } else {
            println!(
                "versions after pruning, {}: {} kernels, min {} mean {:.1} max {} (of 16 candidates); {} kernels keep >= 10",
                m.name,
                n.len(),
                n.iter().min().unwrap_or(&0),
                n.iter().sum::<usize>() as f64 / n.len().max(1) as f64,
                n.iter().max().unwrap_or(&0),
                ten
            );
        }
    }
    if args.selection {
        return Ok(());
    }
    if args.explain {
        for rt in &models {
            for be in &models {
                for v in [Variant::Single, Variant::MultiVersion] {
                    let b = blockers(&spec, rt, be, v)?;
                    if args.json {
                        println!("{}", serde_json::to_value(&b)?);
                        continue;
                    }
                    let first = match &b.first {
                        None => "none: every BE kernel pads some RT kernel".to_string(),
                        Some((k, name, tally)) => format!(
                            "first {k} ({name}): {}; its shortest block {:.1} us, longest RT kernel leaving CUs {:.1} us",
                            tally
                                .iter()
                                .map(|(v, n)| format!("{v} x{n}"))
                                .collect::<Vec<_>>()
                                .join(", "),
                            b.first_min_block_ns.unwrap_or(0) as f64 / 1e3,
                            b.rt_max_paddable_kernel_ns as f64 / 1e3
                        ),
                    };
                    let early = match &b.first_only_early {
                        None => String::new(),
                        Some((k, name, rts)) => format!(
                            "; first admitted only by RT kernels among the first {}: {k} ({name}), by RT kernels {rts:?}",
                            crate::run::REEF_DQ_CAPACITY
                        ),
                    };
                    println!(
                        "{:<10} {:<10} {:<12} {:>3} BE kernels no RT kernel admits; {first}{early}",
                        b.rt,
                        b.be,
                        b.variant,
                        b.blocked.len()
                    );
                }
            }
        }
        return Ok(());
    }
    if !(args.rt_gap_us >= 0.0 && args.rt_gap_us.is_finite()) {
        bail!(
            "--rt-gap-us must be a non-negative number of microseconds, got {}",
            args.rt_gap_us
        );
    }
    let policies: Vec<String> = args
        .policy
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    for p in &policies {
        reef_sched::policy_by_name(p)?;
    }
    let standalone: Vec<f64> = models
        .iter()
        .map(|m| crate::disb::standalone_ns(&spec, m, 5, args.seed))
        .collect::<Result<_>>()?;
    let mut jobs = Vec::new();
    for rt in 0..models.len() {
        for be in 0..models.len() {
            for p in &policies {
                jobs.push((rt, be, p.clone()));
            }
        }
    }
    let threads = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, jobs.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    let t0 = Instant::now();
    std::thread::scope(|sc| {
        for _ in 0..threads {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((rt, be, p)) = jobs.get(i) else {
                    break;
                };
                let r = run_pair(&spec, &models, &standalone, *rt, *be, p, &args);
                results.lock().expect("no panic holds it").push((i, r));
            });
        }
    });
    let mut rs = results.into_inner().expect("joined");
    rs.sort_by_key(|(i, _)| *i);
    let mut out = Vec::new();
    for (_, r) in rs {
        out.push(r?);
    }
    if args.json {
        for r in &out {
            let mut v = serde_json::to_value(r)?;
            v.as_object_mut().map(|o| o.remove("overhead_ns"));
            println!("{v}");
        }
    } else {
        print_pairs(&out);
    }
    eprintln!(
        "{} runs of {} s virtual time in {:.1} s wall",
        out.len(),
        args.duration,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

fn print_pairs(out: &[PairResult]) {
    println!("\nFig. 23: RT latency (norm.), RT + BE throughput (norm.) per RT-BE pair");
    println!(
        "{:<10} {:<10} {:<12} {:>8} {:>7} {:>7} {:>8} {:>7} {:>7} {:>8}",
        "RT", "BE", "policy", "rt_lat", "rt_thr", "be_thr", "overall", "rt_cu", "be_cu", "padded"
    );
    for r in out {
        let f = |x: Option<f64>| x.map_or("-".into(), |v| format!("{:.0}%", 100.0 * v));
        println!(
            "{:<10} {:<10} {:<12} {:>8.3} {:>7.3} {:>7.3} {:>8.3} {:>7} {:>7} {:>7.0}%",
            r.rt,
            r.be,
            r.policy,
            r.rt_latency_norm,
            r.rt_throughput_norm,
            r.be_throughput_norm,
            r.overall_throughput_norm,
            f(r.rt_cu_share),
            f(r.be_cu_share),
            if r.rt_launches > 0 {
                100.0 * r.padded_launches as f64 / r.rt_launches as f64
            } else {
                0.0
            }
        );
    }
    let mut pols: Vec<&str> = out.iter().map(|r| r.policy.as_str()).collect();
    pols.dedup();
    pols.sort();
    pols.dedup();
    println!("\nAverages over pairs:");
    for p in &pols {
        let rs: Vec<&PairResult> = out.iter().filter(|r| r.policy == *p).collect();
        let n = rs.len() as f64;
        let avg = |f: &dyn Fn(&PairResult) -> f64| rs.iter().map(|r| f(r)).sum::<f64>() / n;
        let starved: Vec<String> = rs
            .iter()
            .filter(|r| r.be_throughput_norm == 0.0)
            .map(|r| format!("{}-{}", r.rt, r.be))
            .collect();
        println!(
            "{:<12} rt_lat {:.3} (max {:.3})  overall {:.3} (max {:.3})  BE starved in {} pairs{}",
            p,
            avg(&|r| r.rt_latency_norm),
            rs.iter().map(|r| r.rt_latency_norm).fold(0.0, f64::max),
            avg(&|r| r.overall_throughput_norm),
            rs.iter()
                .map(|r| r.overall_throughput_norm)
                .fold(0.0, f64::max),
            starved.len(),
            if starved.is_empty() {
                String::new()
            } else {
                format!(": {}", starved.join(", "))
            }
        );
        let mut o: Vec<i64> = rs
            .iter()
            .flat_map(|r| r.overhead_ns.iter().copied())
            .collect();
        if !o.is_empty() {
            o.sort_unstable();
            let zero = o.iter().filter(|&&x| x <= 0).count() as f64 / o.len() as f64;
            println!(
                "{:<12} Fig. 27 padded RT kernel overhead over {} launches: {:.1}% <= 0; p50 {} ns, p90 {} ns, p99 {} ns, max {} ns",
                "",
                o.len(),
                100.0 * zero,
                pct(&o, 50.0),
                pct(&o, 90.0),
                pct(&o, 99.0),
                o[o.len() - 1]
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn models(spec: &DeviceSpec, names: &[&str]) -> Vec<PreparedModel> {
        let dir = reef_model::default_models_dir();
        names
            .iter()
            .map(|n| PreparedModel::new(reef_model::load_named(&dir, n).unwrap(), spec).unwrap())
            .collect()
    }

    fn pair(policy: &str, secs: f64) -> runner::RunOutcome {
        let spec = DeviceSpec::preset("mi50").unwrap();
        let ms = models(&spec, &["vgg", "resnet152"]);
        let plans = vec![
            ClientPlan {
                name: "rt".into(),
                model: 0,
                class: Class::RealTime,
                gen: Gen::Continuous,
            },
            ClientPlan {
                name: "be".into(),
                model: 1,
                class: Class::BestEffort,
                gen: Gen::Continuous,
            },
        ];
        runner::simulate(
            &spec,
            &ms,
            plans,
            (secs * 1e9) as u64,
            &RunOptions {
                policy: policy.into(),
                seed: 1,
                dq_capacity: 4,
                track_values: true,
            },
        )
        .unwrap()
    }

    #[test]
    fn padding_gives_be_progress_without_touching_rt_and_keeps_values() {
        // DISB B-like: closed-loop RT vgg, closed-loop BE resnet152.
        let base = pair("reef-nodkp", 0.5);
        let mv = pair("reef-dkp-mv", 0.5);
        let mean = |o: &runner::RunOutcome| {
            let l = &o.clients[0].latencies;
            l.iter().sum::<u64>() as f64 / l.len() as f64
        };
        assert_eq!(base.corrupted_outputs, 0);
        assert_eq!(mv.corrupted_outputs, 0);
        // Preemption alone starves BE under a closed-loop RT client.
        assert_eq!(base.clients[1].completed, 0);
        let p = mv.padding.as_ref().unwrap();
        assert!(p.padded_launches > 0);
        assert!(p.be_kernels_completed_by_padding > 0);
        assert!(
            mv.clients[1].completed > 0,
            "BE requests completed by padding"
        );
        // RT latency within 3% of preemption alone.
        assert!(
            mean(&mv) <= 1.03 * mean(&base),
            "{} vs {}",
            mean(&mv),
            mean(&base)
        );
        // Rule 1: no padded launch outlasts its RT kernel.
        assert!(p.overhead_ns.iter().all(|&o| o <= 0));
        assert!(base.padding.is_none());
    }

    /// Runs one pairwise configuration (closed-loop RT and BE clients).
    fn run(rt: &str, be: &str, policy: &str, secs: f64) -> runner::RunOutcome {
        let spec = DeviceSpec::preset("mi50").unwrap();
        let ms = models(&spec, &[rt, be]);
        let plans = vec![
            ClientPlan {
                name: "rt".into(),
                model: 0,
                class: Class::RealTime,
                gen: Gen::Continuous,
            },
            ClientPlan {
                name: "be".into(),
                model: 1,
                class: Class::BestEffort,
                gen: Gen::Continuous,
            },
        ];
        let opts = RunOptions {
            policy: policy.into(),
            seed: 1,
            dq_capacity: 4,
            track_values: true,
        };
        runner::simulate(&spec, &ms, plans, (secs * 1e9) as u64, &opts).unwrap()
    }

    #[test]
    fn explain_predicts_where_a_closed_loop_pair_stops() {
        let spec = DeviceSpec::preset("mi50").unwrap();
        // DKP-MV with RT densenet and BE inception: kernel 52 of inception
        // is admitted by no RT kernel, and the run stops right there.
        let ms = models(&spec, &["densenet", "inception"]);
        let b = blockers(&spec, &ms[0], &ms[1], Variant::MultiVersion).unwrap();
        let first = b.first.as_ref().expect("a blocked BE kernel").0;
        assert!(b
            .first
            .as_ref()
            .unwrap()
            .2
            .iter()
            .all(|(v, _)| *v != "padded"));
        let out = run("densenet", "inception", "reef-dkp-mv", 1.0);
        assert_eq!(out.corrupted_outputs, 0);
        assert_eq!(out.clients[1].completed, 0);
        let p = out.padding.unwrap();
        assert_eq!(p.be_kernels_completed_by_padding, first as u64);
        // DKP with RT vgg and BE resnet152: every BE kernel is admitted by
        // some RT kernel past the first four, and BE requests complete.
        let ms = models(&spec, &["vgg", "resnet152"]);
        let b = blockers(&spec, &ms[0], &ms[1], Variant::Single).unwrap();
        assert!(b.blocked.is_empty() && b.first_only_early.is_none());
        let out = run("vgg", "resnet152", "reef", 1.0);
        assert_eq!(out.corrupted_outputs, 0);
        assert!(out.clients[1].completed > 0);
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

    #[test]
    fn selection_time_runs_over_ten_versions() {
        let spec = DeviceSpec::preset("mi50").unwrap();
        let ms = models(&spec, &["resnet152", "inception"]);
        let r = selection_time(&spec, &ms[0], &ms[1], 5, 10, 1000).unwrap();
        assert_eq!(r.be_clients, 5);
        assert_eq!(r.versions_per_kernel, 10);
        assert!(r.padded_share > 0.0);
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
        px.launch(
            sim,
            s0,
            p,
            &ms[0],
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

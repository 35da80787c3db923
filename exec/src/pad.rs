//! Padded launches on the simulator (REEF §5.1, Fig. 12; the crate doc
//! says how a padded launch is laid out and reported).

use super::*;
use crate::parts::PartGroup;

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
    /// Real-time kernels `reef-max`'s `guard` launched unpadded
    /// (`DkpCounters::guard_held`).
    pub guard_held: u64,
    /// Per padded launch: its duration (real-time part start to the last
    /// part's completion) minus the real-time kernel's stand-alone
    /// execution time, ns (Fig. 27).
    pub overhead_ns: Vec<i64>,
    /// The real-time kernel's stand-alone time each `overhead_ns` entry
    /// is measured against, in the same order (for the padded-launch
    /// overhead's bound, REEF §6.5 Fig. 25; not reported).
    #[serde(skip)]
    pub overhead_rt_ns: Vec<u64>,
    /// CU·ns of real-time parts and of best-effort parts of padded
    /// launches, and of all real-time kernels' whole-device time.
    pub rt_cu_ns: u128,
    pub be_cu_ns: u128,
    pub device_cu_ns: u128,
    /// CU·ns during which a best-effort part's CUs stood idle because the
    /// part finished before the real-time part of its padded launch (its
    /// CUs × the time from its end to the real-time part's end), over
    /// completed padded launches: what a padded launch leaves beside the
    /// real-time kernel once its best-effort blocks have run out.
    pub be_early_cu_ns: u128,
    /// The part of `be_early_cu_ns` whose part ran its kernel's last block:
    /// the task's next kernel could have started there.
    pub be_early_done_cu_ns: u128,
    /// Best-effort parts that followed another part of their task behind a
    /// grid barrier (`reef-max`'s `chain`), and their blocks.
    pub chained_parts: u64,
    pub chained_blocks: u64,
}

/// The cost of the grid barrier between a padded part and the chained part
/// after it (`reef_sched::dkp::chain`; `reef_sim::KernelLaunch::after`):
/// the last arriving block's atomic on a counter in global memory and the
/// waiting blocks' next read of it, each at most one DRAM round trip
/// (`dram_latency_ns`: atomics resolve in the L2, which is nearer), and
/// never less than the command processor's own resolution of a
/// kernel-to-kernel dependency in a queue (`cp_dispatch_ns`, "barrier
/// resolution + workgroup dispatcher start" in sim/devices/mi50.toml),
/// which a software barrier is not taken to beat: MI50 and GV100 2 us.
pub fn barrier_ns(spec: &DeviceSpec) -> u64 {
    (2 * spec.dram_latency_ns).max(spec.cp_dispatch_ns)
}

/// What [`PadExec`] keeps beside a padded launch in flight, for its
/// figures.
pub(crate) struct Pending {
    rt_ns: u64,
    rt_cus: u32,
    be_cus: u32,
    /// Per best-effort part: its launch id, CUs, whether it ends at its
    /// kernel's last block with no chained part after it, whether a
    /// chained part follows it, and when it completed.
    be_parts: Vec<(LaunchId, u32, bool, bool, Option<Time>)>,
    /// When the real-time part completed.
    rt_end: Option<Time>,
}

/// Executes padded launches on the simulator (REEF §5.1, Fig. 12; see the
/// module doc).
pub struct PadExec {
    table: Arc<DkpTable>,
    spec: DeviceSpec,
    /// Padded launches by the launch id of their real-time part.
    pub(crate) pending: HashMap<LaunchId, PartGroup<Pending>>,
    /// Every part's launch id (real-time part included) → real-time part's.
    pub(crate) part_of: HashMap<LaunchId, LaunchId>,
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
        // (CUs, runs its kernel's last block, followed by a chained part) of
        // the shared parts and of the others, in launch order.
        let (mut meta_shared, mut meta_rest) = (Vec::new(), Vec::new());
        // Each part's index among the launch's parts (filled below).
        let mut index = Vec::with_capacity(p.parts.len());
        let barrier = barrier_ns(&self.spec);
        for (pi, part) in p.parts.iter().enumerate() {
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
            .with_cus(
                CuSet::range(part.cus.start as usize, part.cus.end as usize).or(&CuSet::range(
                    part.extra.start as usize,
                    part.extra.end as usize,
                )),
            );
            // A chained part: after the part it follows, behind the grid
            // barrier (its index among the launch's parts is set below).
            if let Some(a) = part.after {
                l.after = Some((a, barrier));
                l.persistent = Some(part.per_cu);
                self.stats.chained_parts += 1;
                self.stats.chained_blocks += part.blocks.len() as u64;
            }
            // More blocks than slots (`reef-max`'s waves): the dkp kernel's
            // best-effort threads loop over them, `per_cu` slots per CU.
            let beside_rt = part.cus.start < p.rt_cus;
            if beside_rt || part.blocks.len() as u64 > part.cus.len() as u64 * part.per_cu as u64 {
                l.persistent = Some(part.per_cu);
            }
            let total = self.table.kernels[part.model.0 as usize][part.tag.kernel as usize]
                [part.version as usize]
                .blocks;
            let followed = p.parts.iter().any(|x| x.after == Some(pi));
            let meta = (
                (part.cus.len() + part.extra.len()) as u32,
                part.blocks.end == total,
                followed,
            );
            if beside_rt {
                index.push((true, shared.len()));
                shared.push(l);
                meta_shared.push(meta);
            } else {
                index.push((false, parts.len()));
                parts.push(l);
                meta_rest.push(meta);
            }
        }
        let rt_at = shared.len();
        if rt_at > 0 {
            shared.append(&mut parts);
            parts = shared;
        }
        // `after` named the followed part's index in `p.parts`: now its
        // index in the launch (shared parts first, then the RT part, then
        // the others).
        let at = |i: usize| match index[i] {
            (true, j) => j,
            (false, j) => rt_at + j,
        };
        for l in parts.iter_mut() {
            if let Some((a, d)) = l.after {
                l.after = Some((at(a), d));
            }
        }
        // When the launch, built, is issued to the device queue: a live
        // daemon's control path ends here (a wall-clock reading for
        // measurement only; nothing depends on it).
        let issued = std::time::Instant::now();
        let ids = device::launch_parts(dev, s0, parts).map_err(anyhow::Error::msg)?;
        let be_ids = ids[..rt_at].iter().chain(&ids[rt_at + 1..]);
        let be_parts = be_ids
            .zip(meta_shared.into_iter().chain(meta_rest))
            .map(|(&id, (cus, last, followed))| (id, cus, last && !followed, followed, None))
            .collect();
        PartGroup::track(
            &mut self.pending,
            &mut self.part_of,
            &ids,
            rt_at,
            p.tag,
            s0,
            Pending {
                rt_ns,
                rt_cus: p.rt_cus,
                be_cus,
                be_parts,
                rt_end: None,
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
        let n = self.spec.compute_units as u128;
        let (keep_overhead, stats) = (self.keep_overhead, &mut self.stats);
        PartGroup::filter(
            &mut self.pending,
            &mut self.part_of,
            ev,
            |info, e, head| {
                if !matches!(e.kind, EventKind::Completed) {
                    return;
                }
                if head {
                    info.rt_end = Some(e.time);
                } else if let Some(x) = info.be_parts.iter_mut().find(|x| x.0 == e.launch) {
                    x.4 = Some(e.time);
                }
            },
            |p, e| {
                let (EventKind::Completed, Some(s)) = (e.kind, p.started) else {
                    return;
                };
                let d = e.time - s;
                if keep_overhead {
                    stats.overhead_ns.push(d as i64 - p.info.rt_ns as i64);
                    stats.overhead_rt_ns.push(p.info.rt_ns);
                }
                stats.rt_cu_ns += p.info.rt_cus as u128 * d as u128;
                stats.be_cu_ns += p.info.be_cus as u128 * d as u128;
                stats.device_cu_ns += n * d as u128;
                let Some(rt_end) = p.info.rt_end else {
                    return;
                };
                for &(_, cus, last, followed, end) in &p.info.be_parts {
                    // A followed part's CUs run its successor.
                    let Some(end) = end.filter(|&e| e < rt_end && !followed) else {
                        continue;
                    };
                    let idle = cus as u128 * (rt_end - end) as u128;
                    stats.be_early_cu_ns += idle;
                    if last {
                        stats.be_early_done_cu_ns += idle;
                    }
                }
            },
        )
    }
}

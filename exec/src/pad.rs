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

/// What [`PadExec`] keeps beside a padded launch in flight, for its
/// figures.
pub(crate) struct Pending {
    rt_ns: u64,
    rt_cus: u32,
    be_cus: u32,
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
        PartGroup::filter(&mut self.pending, &mut self.part_of, ev, |p, e| {
            if let (EventKind::Completed, Some(s)) = (e.kind, p.started) {
                let d = e.time - s;
                if keep_overhead {
                    stats.overhead_ns.push(d as i64 - p.info.rt_ns as i64);
                }
                stats.rt_cu_ns += p.info.rt_cus as u128 * d as u128;
                stats.be_cu_ns += p.info.be_cus as u128 * d as u128;
                stats.device_cu_ns += n * d as u128;
            }
        })
    }
}

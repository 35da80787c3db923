//! Offline kernel characteristics and proxy kernels (REEF §5.1 "Dynamic
//! register allocation" and "Dynamic shared memory"; §5.2 footnote 3 for CU
//! occupancy; Fig. 13 for block vs kernel execution time).
//!
//! A [`KernelChar`] is what REEF's offline kernel profiler records for one
//! kernel (or one version of it, §5.3): grid size, block size, per-block
//! registers and shared memory, and the measured block execution time as a
//! function of the number of co-resident blocks on a CU (the `latency[k]`
//! curves of `../shared/models`). From these it derives the CU occupancy
//! (blocks per CU, statically known) and the kernel execution time.
//!
//! [`ProxyKernels`]: one proxy (dkp) kernel per CU occupancy level. On the
//! MI50 an occupancy level is a number of waves per SIMD (1..=10, §5.1: "10
//! CU occupancy levels ... 10 proxy kernels"); proxy level `L` allocates the
//! largest per-thread register count that still lets `L` waves share a SIMD.
//! A padded launch uses the proxy with the fewest registers that fulfils the
//! largest per-thread demand of its parts, and sizes its (dynamic) shared
//! memory to the largest demand of its parts.

/// Per-CU limits of the device the profiles were taken on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    pub compute_units: u32,
    pub wave_size: u32,
    pub max_waves_per_cu: u32,
    pub max_threads_per_cu: u32,
    pub max_blocks_per_cu: u32,
    pub lds_bytes_per_cu: u32,
    /// 32-bit registers per CU (all SIMDs).
    pub registers_per_cu: u32,
    /// SIMD units per CU (4 on GCN/Vega: AMD "Vega" ISA guide §2).
    pub simds_per_cu: u32,
}

impl DeviceLimits {
    /// Registers a block of `threads` threads holds with `per_lane`
    /// registers per lane: VGPRs are allocated for whole waves, so a block
    /// of 4 threads holds as many as one of 64 (on a 64-lane device).
    pub fn block_registers(&self, per_lane: u32, threads: u32) -> u32 {
        let lanes = threads.div_ceil(self.wave_size).max(1) * self.wave_size;
        per_lane.saturating_mul(lanes)
    }

    /// Registers per lane of a block of `threads` threads holding
    /// `regs_per_block` (rounded up): the inverse of [`Self::block_registers`].
    pub fn lane_registers(&self, regs_per_block: u32, threads: u32) -> u32 {
        regs_per_block.div_ceil(threads.div_ceil(self.wave_size).max(1) * self.wave_size)
    }

    /// Blocks of this shape that fit on one empty CU (0: does not fit).
    pub fn occupancy(&self, threads: u32, lds: u32, regs_per_block: u32) -> u32 {
        if threads == 0 {
            return 0;
        }
        let waves = threads.div_ceil(self.wave_size).max(1);
        let mut occ = (self.max_threads_per_cu / threads)
            .min(self.max_waves_per_cu / waves)
            .min(self.max_blocks_per_cu);
        if let Some(o) = self.lds_bytes_per_cu.checked_div(lds) {
            occ = occ.min(o);
        }
        if let Some(o) = self.registers_per_cu.checked_div(regs_per_block) {
            occ = occ.min(o);
        }
        occ
    }
}

/// One kernel (version) as the offline profiler sees it.
///
/// Layout (issue 28's decision cost): the selection walks every version of
/// each best-effort task's next kernel, and `perf annotate` put the p99 of
/// its decisions on cache misses on these profiles (docs/results-max.md,
/// "Decision cost"), so a version is one aligned 64-byte cache line holding
/// every field the selection's first checks read, the one-block time
/// (rule 1's pre-check) among them; the curve and its ceiling share one
/// allocation, read only by the versions that pass those checks. The
/// accessors give exactly what separate `curve` and `ceiling` vectors gave
/// (a property test in `profile::tests` compares them).
#[derive(Debug, Clone, PartialEq, Eq)]
#[repr(align(64))]
pub struct KernelChar {
    /// Blocks in the grid.
    pub blocks: u32,
    /// Threads per block.
    pub threads: u32,
    /// Shared memory (LDS) bytes per block.
    pub lds: u32,
    /// 32-bit registers per block (all threads).
    pub regs_per_block: u32,
    /// Blocks per CU (statically known, §5.2 rule 2).
    pub occupancy: u32,
    /// Registers per lane of the block's waves (rounded up): the
    /// per-thread allocation the kernel was compiled with (VGPRs are per
    /// lane, allocated for whole waves).
    pub regs_per_thread: u32,
    /// Compute units it needs as a real-time kernel on the profiled device
    /// ([`Self::reserved_cus`] of its CU count, computed once).
    pub rt_cus: u32,
    /// Execution time of all blocks on the whole device, ns (Fig. 13 hollow bars).
    pub kernel_ns: u64,
    /// `curve[0]`: one block alone on its CU, ns (rule 1's pre-check reads
    /// it without the curve).
    block1_ns: u64,
    /// The curve's largest time, ns, when it is below `u32::MAX`, else
    /// `u32::MAX` (unknown): rule 1 admits every measured co-residency
    /// below a limit above it without the curve.
    top_ns: u32,
    /// The curve then its ceiling, `n` entries each: `curve[k-1]` is one
    /// block's execution time (ns) with k co-resident blocks on its CU
    /// (never empty); `ceiling[k-1]` = max(curve[0..k]), a non-decreasing
    /// bound used by rule 1 (a smaller co-residency is never assumed
    /// slower than this).
    times: Box<[u64]>,
}

impl KernelChar {
    /// Characteristics of a kernel on a device; `None` when a block does not
    /// fit on a CU or the curve is empty.
    pub fn new(
        limits: &DeviceLimits,
        blocks: u32,
        threads: u32,
        lds: u32,
        regs_per_block: u32,
        curve: Vec<u64>,
    ) -> Option<Self> {
        if blocks == 0 || curve.is_empty() {
            return None;
        }
        let occupancy = limits.occupancy(threads, lds, regs_per_block);
        if occupancy == 0 {
            return None;
        }
        let n = curve.len();
        let mut times = Vec::with_capacity(2 * n);
        times.extend_from_slice(&curve);
        let mut top = 0;
        for &t in &curve {
            top = top.max(t);
            times.push(top);
        }
        let mut k = Self {
            blocks,
            threads,
            lds,
            regs_per_block,
            occupancy,
            kernel_ns: 0,
            // Registers are allocated per lane of whole waves: a block of 4
            // threads still holds a 64-lane wave's registers.
            regs_per_thread: limits.lane_registers(regs_per_block, threads),
            rt_cus: 0,
            block1_ns: curve[0],
            top_ns: u32::try_from(top).unwrap_or(u32::MAX),
            times: times.into_boxed_slice(),
        };
        k.kernel_ns = k.kernel_time(limits.compute_units);
        k.rt_cus = k.reserved_cus(limits.compute_units);
        Some(k)
    }

    /// One block's execution time with `k` (≥ 1) co-resident blocks; past the
    /// measured curve it grows by the curve's last slope (as the simulator
    /// extends it).
    pub fn block_ns(&self, k: u32) -> u64 {
        if k <= 1 {
            return self.block1_ns;
        }
        let curve = self.curve();
        let k = k as usize;
        match curve.get(k - 1) {
            Some(&t) => t,
            None => {
                let n = curve.len();
                let last = curve[n - 1];
                let slope = if n >= 2 {
                    last.saturating_sub(curve[n - 2])
                } else {
                    0
                };
                last + slope * (k - n) as u64
            }
        }
    }

    /// An upper bound of one block's time with at most `k` (≥ 1)
    /// co-resident blocks: the curve's non-decreasing ceiling, past the
    /// curve its extension (`reef-max`'s `share`, [`super::share`]).
    pub fn block_bound_ns(&self, k: u32) -> u64 {
        let ceiling = self.ceiling();
        let n = ceiling.len();
        let i = (k.max(1) as usize).min(n);
        ceiling[i - 1].max(self.block_ns(k))
    }

    /// The measured curve.
    pub fn curve(&self) -> &[u64] {
        &self.times[..self.times.len() / 2]
    }

    /// The curve's non-decreasing ceiling (`ceiling[k-1]` = max(curve[0..k])).
    fn ceiling(&self) -> &[u64] {
        &self.times[self.times.len() / 2..]
    }

    /// Largest co-residency `p ≤ cap` whose block time (and the time of every
    /// smaller co-residency) is below `limit` (rule 1); 0 if none.
    pub fn max_coresidency_within(&self, cap: u32, limit: u64) -> u32 {
        // From the inline fields where they decide, not the curve's lines:
        // the ceiling starts at one block's time (none within the limit
        // when it is not below it, whatever the cap) and is at most the
        // curve's top (every measured co-residency up to the cap within
        // the limit when the top is below it).
        if cap == 0 || self.block1_ns >= limit {
            return 0;
        }
        if cap == 1 {
            return 1;
        }
        let n = self.times.len() / 2;
        if cap as usize <= n && self.top_ns != u32::MAX && u64::from(self.top_ns) < limit {
            return cap;
        }
        let cap = cap as usize;
        let within = |t: u64| t < limit;
        let (curve, ceiling) = self.times.split_at(self.times.len() / 2);
        let n = ceiling.len();
        // Measured part: binary search over the non-decreasing ceiling.
        let measured = ceiling[..cap.min(n)].partition_point(|&t| within(t));
        if measured < cap.min(n) || cap <= n {
            return measured as u32;
        }
        // Past the curve: the extension grows linearly from the last point
        // by the last slope (`block_ns`), and the whole measured ceiling,
        // which bounds it below, is within the limit here. Step `j` past
        // the curve takes `last + slope * j`, within the limit for `j <=
        // (limit - last - 1) / slope` (every `j` when the slope is 0): a
        // division, not a walk over the steps (issue 28's decision cost;
        // `max_coresidency_by_walk` in the tests is the walk, and a
        // property test checks both agree).
        let last = curve[n - 1];
        let slope = if n >= 2 {
            last.saturating_sub(curve[n - 2])
        } else {
            0
        };
        // last <= ceiling[n - 1] < limit.
        let steps = (limit - last - 1).checked_div(slope).unwrap_or(u64::MAX);
        (n as u64).saturating_add(steps).min(cap as u64) as u32
    }

    /// Kernel execution time alone on `cus` compute units: blocks spread
    /// evenly (at most `occupancy` per CU per wave), waves back to back.
    fn kernel_time(&self, cus: u32) -> u64 {
        self.time_on(cus, self.occupancy)
    }

    /// Kernel execution time on `cus` compute units when at most
    /// `occupancy` of its blocks fit a CU (its own occupancy, or less under
    /// a proxy kernel's larger allocation); `u64::MAX` when none fits.
    pub fn time_on(&self, cus: u32, occupancy: u32) -> u64 {
        if cus == 0 || occupancy == 0 {
            return u64::MAX;
        }
        let per_wave = cus as u64 * occupancy as u64;
        let b = self.blocks as u64;
        if b <= per_wave {
            self.block_ns(b.div_ceil(cus as u64) as u32)
        } else {
            let full = b / per_wave;
            let rest = b % per_wave;
            let mut t = full * self.block_ns(occupancy);
            if rest > 0 {
                t += self.block_ns(rest.div_ceil(cus as u64) as u32);
            }
            t
        }
    }
}

impl KernelChar {
    /// The compute units a real-time kernel needs (REEF §5.2: "it first
    /// reserves enough CUs for the real-time kernel"; Fig. 12 lines 1–3):
    /// the fewest on which it runs as fast as on the whole device of `n`
    /// CUs. Alone, its `b` blocks are spread evenly, so its slowest CU holds
    /// `L = ceil(b / n)` of them (its "logical layers"); `ceil(b / L)` CUs
    /// holding at most `L` each give the same co-residency and, with blocks
    /// placed in waves of `occupancy` per CU, the same time (checked against
    /// [`Self::time_on`]). This is the partition of REEF's implementation
    /// (`cu_partition` in SJTU-IPADS/reef `scheduler.cpp`). A kernel of
    /// fewer blocks than CUs keeps one CU per block; `n` means no CU is left
    /// over.
    pub fn reserved_cus(&self, n: u32) -> u32 {
        let layers = self.blocks.div_ceil(n).max(1);
        let p = self.blocks.div_ceil(layers).min(n);
        if self.time_on(p, self.occupancy) <= self.kernel_ns {
            p
        } else {
            n
        }
    }
}

/// The proxy kernels: one per occupancy level (waves per SIMD).
#[derive(Debug, Clone)]
pub struct ProxyKernels {
    /// `alloc[L-1]`: registers per thread allocated by proxy level L.
    alloc: Vec<u32>,
}

impl ProxyKernels {
    /// Levels `1..=max_waves_per_cu / simds_per_cu`; level L allocates
    /// `vgprs_per_lane / L` registers per thread, where `vgprs_per_lane =
    /// registers_per_cu / (simds × wave_size)` (256 on the MI50).
    pub fn new(limits: &DeviceLimits) -> Self {
        let simds = limits.simds_per_cu.max(1);
        let levels = (limits.max_waves_per_cu / simds).max(1);
        let per_lane = limits.registers_per_cu / (simds * limits.wave_size.max(1));
        Self {
            alloc: (1..=levels).map(|l| per_lane / l).collect(),
        }
    }

    /// Number of proxy kernels.
    pub fn levels(&self) -> usize {
        self.alloc.len()
    }

    /// Registers per thread allocated by level `l` (1-based).
    pub fn alloc(&self, l: u8) -> u32 {
        self.alloc[l as usize - 1]
    }

    /// The proxy with the fewest allocated registers that fulfils a demand of
    /// `regs_per_thread` (the highest occupancy level possible); `None` when
    /// even level 1 cannot.
    pub fn pick(&self, regs_per_thread: u32) -> Option<u8> {
        // alloc is decreasing in L: the last level whose allocation fits.
        let n = self.alloc.partition_point(|&a| a >= regs_per_thread);
        (n > 0).then_some(n as u8)
    }
}

#[cfg(test)]
pub(crate) fn mi50() -> DeviceLimits {
    DeviceLimits {
        compute_units: 60,
        wave_size: 64,
        max_waves_per_cu: 40,
        max_threads_per_cu: 2560,
        max_blocks_per_cu: 40,
        lds_bytes_per_cu: 65536,
        registers_per_cu: 65536,
        simds_per_cu: 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The walk past the curve that [`KernelChar::max_coresidency_within`]
    /// replaced with a division, kept as its reference.
    fn max_coresidency_by_walk(k: &KernelChar, cap: u32, limit: u64) -> u32 {
        let cap = cap as usize;
        let within = |t: u64| t < limit;
        let n = k.ceiling().len();
        let measured = k.ceiling()[..cap.min(n)].partition_point(|&t| within(t));
        if measured < cap.min(n) || cap <= n {
            return measured as u32;
        }
        let mut p = n;
        while p < cap && within(k.block_ns(p as u32 + 1).max(k.ceiling()[n - 1])) {
            p += 1;
        }
        p as u32
    }

    /// The profile as separate `curve` and `ceiling` vectors, with the
    /// accessors as they read them before the one-line layout of
    /// [`KernelChar`]: the reference the layout is checked against.
    struct Plain {
        curve: Vec<u64>,
        ceiling: Vec<u64>,
    }

    impl Plain {
        fn new(curve: &[u64]) -> Self {
            let mut ceiling = curve.to_vec();
            for i in 1..ceiling.len() {
                ceiling[i] = ceiling[i].max(ceiling[i - 1]);
            }
            Self {
                curve: curve.to_vec(),
                ceiling,
            }
        }

        fn block_ns(&self, k: u32) -> u64 {
            let k = k.max(1) as usize;
            match self.curve.get(k - 1) {
                Some(&t) => t,
                None => {
                    let n = self.curve.len();
                    let last = self.curve[n - 1];
                    let slope = if n >= 2 {
                        last.saturating_sub(self.curve[n - 2])
                    } else {
                        0
                    };
                    last + slope * (k - n) as u64
                }
            }
        }

        fn block_bound_ns(&self, k: u32) -> u64 {
            let n = self.ceiling.len();
            let i = (k.max(1) as usize).min(n);
            self.ceiling[i - 1].max(self.block_ns(k))
        }

        fn max_coresidency_within(&self, cap: u32, limit: u64) -> u32 {
            let cap = cap as usize;
            let within = |t: u64| t < limit;
            let n = self.ceiling.len();
            let measured = self.ceiling[..cap.min(n)].partition_point(|&t| within(t));
            if measured < cap.min(n) || cap <= n {
                return measured as u32;
            }
            let last = self.curve[n - 1];
            let slope = if n >= 2 {
                last.saturating_sub(self.curve[n - 2])
            } else {
                0
            };
            let steps = (limit - last - 1).checked_div(slope).unwrap_or(u64::MAX);
            (n as u64).saturating_add(steps).min(cap as u64) as u32
        }
    }

    /// Curves with times at and past `u32::MAX` (the inline top cannot
    /// hold them and must not decide) read as the plain vectors.
    #[test]
    fn the_compact_layout_reads_long_times_as_the_plain_vectors() {
        let m = u32::MAX as u64;
        for curve in [
            vec![m - 1, m],
            vec![m, m + 1, m + 5],
            vec![5, m - 2, m + 1],
            vec![m + 10],
            vec![3, m - 1],
        ] {
            let k = KernelChar::new(&mi50(), 100, 64, 0, 0, curve.clone()).unwrap();
            let p = Plain::new(&curve);
            for &t in &curve {
                for limit in [t - 1, t, t + 1, m - 1, m, m + 1, u64::MAX] {
                    for cap in 0..8 {
                        assert_eq!(
                            k.max_coresidency_within(cap, limit),
                            p.max_coresidency_within(cap, limit),
                            "{curve:?} cap {cap} limit {limit}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_version_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<KernelChar>(), 64);
        assert_eq!(std::mem::align_of::<KernelChar>(), 64);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

        /// The one-line layout reads what separate vectors read: every
        /// block time, bound and rule-1 search, at every co-residency in
        /// and past the curve, at limits on and beside every curve point.
        #[test]
        fn the_compact_layout_reads_as_the_plain_vectors(
            curve in proptest::collection::vec(1u64..100_000, 1..40),
            cap in 0u32..60,
            limit in 0u64..300_000,
        ) {
            let k = KernelChar::new(&mi50(), 100, 64, 0, 0, curve.clone()).unwrap();
            let p = Plain::new(&curve);
            prop_assert_eq!(k.curve(), &curve[..]);
            prop_assert_eq!(k.ceiling(), &p.ceiling[..]);
            for q in 0..(curve.len() as u32 + 8) {
                prop_assert_eq!(k.block_ns(q), p.block_ns(q));
                prop_assert_eq!(k.block_bound_ns(q), p.block_bound_ns(q));
            }
            let mut limits = vec![limit, 0, 1, u64::MAX];
            for &t in &curve {
                limits.extend([t - 1, t, t + 1]);
            }
            for limit in limits {
                for c in [0, 1, 2, cap, cap + 1] {
                    prop_assert_eq!(
                        k.max_coresidency_within(c, limit),
                        p.max_coresidency_within(c, limit),
                        "cap {} limit {}", c, limit
                    );
                }
            }
        }


        #[test]
        fn coresidency_search_equals_the_walk(
            curve in proptest::collection::vec(1u64..100_000, 1..12),
            cap in 0u32..200,
            limit in 0u64..400_000,
        ) {
            let k = KernelChar::new(&mi50(), 100, 64, 0, 0, curve).unwrap();
            // The random limit, and every limit at or beside a step of
            // the extension past the curve.
            let n = k.curve().len();
            let last = k.curve()[n - 1];
            let slope = if n >= 2 { last.saturating_sub(k.curve()[n - 2]) } else { 0 };
            let mut limits = vec![limit];
            for j in 0..60u64 {
                for d in [0, 1, 2] {
                    limits.push((last + slope * j + d).saturating_sub(1));
                }
            }
            for limit in limits {
                prop_assert_eq!(
                    k.max_coresidency_within(cap, limit),
                    max_coresidency_by_walk(&k, cap, limit),
                    "limit {}", limit
                );
            }
        }
    }

    #[test]
    fn occupancy_follows_the_tightest_limit() {
        let d = mi50();
        // 256 threads = 4 waves: 10 by waves.
        assert_eq!(d.occupancy(256, 0, 0), 10);
        // 8 KiB LDS per block: 8 by LDS.
        assert_eq!(d.occupancy(256, 8192, 0), 8);
        // 65536/5 registers per block: 5 by registers.
        assert_eq!(d.occupancy(256, 0, 65536 / 5), 5);
        assert_eq!(d.occupancy(64, 0, 0), 40);
        assert_eq!(d.occupancy(256, 70000, 0), 0);
    }

    #[test]
    fn kernel_time_counts_waves() {
        let d = mi50();
        // 30 blocks, occupancy 8: one block per CU at k=1.
        let k = KernelChar::new(&d, 30, 256, 0, 65536 / 8, vec![10, 20, 30]).unwrap();
        assert_eq!(k.occupancy, 8);
        assert_eq!(k.kernel_ns, 10);
        // 120 blocks on 60 CUs: 2 per CU.
        let k = KernelChar::new(&d, 120, 256, 0, 65536 / 8, vec![10, 20, 30]).unwrap();
        assert_eq!(k.kernel_ns, 20);
        // 60*2*2 + 60 blocks at occupancy 2: two full waves at k=2, one at k=1.
        let k = KernelChar::new(&d, 300, 256, 0, 65536 / 2, vec![10, 20]).unwrap();
        assert_eq!(k.occupancy, 2);
        assert_eq!(k.kernel_ns, 20 + 20 + 10);
        // Past the curve: linear extension by the last slope.
        assert_eq!(k.block_ns(4), 40);
    }

    #[test]
    fn reserved_cus_keep_the_kernel_time() {
        let d = mi50();
        let curve = vec![10, 12, 14, 16];
        let k =
            |blocks: u32| KernelChar::new(&d, blocks, 256, 0, 65536 / 4, curve.clone()).unwrap();
        // Fewer blocks than CUs: one CU per block.
        assert_eq!(k(30).reserved_cus(60), 30);
        // 100 blocks: 2 on the busiest CU alone (12 ns); 50 CUs x 2 as fast.
        assert_eq!(k(100).kernel_ns, 12);
        assert_eq!(k(100).reserved_cus(60), 50);
        assert_eq!(k(100).time_on(50, 4), 12);
        // One CU fewer would put 3 blocks on some CU: slower.
        assert_eq!(k(100).time_on(49, 4), 14);
        // 196 blocks: 4 layers on 49 CUs; 11 CUs left over.
        assert_eq!(k(196).reserved_cus(60), 49);
        assert_eq!(k(196).time_on(49, 4), k(196).kernel_ns);
        // A multiple of the CU count fills every CU.
        assert_eq!(k(120).reserved_cus(60), 60);
        // More blocks than fit at once (occupancy 4): 250 blocks = one full
        // wave of 240 and 10 more (16 + 10 ns alone). On ceil(250 / 5) = 50
        // CUs: 200 at 4 per CU, then 50 at 1 per CU, as fast.
        assert_eq!(k(250).kernel_ns, 26);
        assert_eq!(k(250).reserved_cus(60), 50);
        assert_eq!(k(250).time_on(50, 4), 26);
        // Fewer blocks per CU under a larger register allocation: two waves
        // of 2 (24 ns) instead of one of 4 (16 ns).
        assert_eq!(k(196).time_on(49, 2), 24);
        assert_eq!(k(196).time_on(49, 0), u64::MAX);
    }

    #[test]
    fn rule1_coresidency_search() {
        let d = mi50();
        let k = KernelChar::new(&d, 30, 64, 0, 0, vec![10, 12, 11, 20, 30]).unwrap();
        // limit 21: ceiling = [10,12,12,20,30] → p=4.
        assert_eq!(k.max_coresidency_within(40, 21), 4);
        assert_eq!(k.max_coresidency_within(3, 21), 3);
        // limit 16: p=3 (ceiling 12; the measured 11 at k=3 counts as 12).
        assert_eq!(k.max_coresidency_within(40, 16), 3);
        // strict: a block as long as the limit does not pass.
        assert_eq!(k.max_coresidency_within(40, 10), 0);
        // Extension: slope 10 past k=5: 40, 50, 60, ...; limit 51 → p=7.
        assert_eq!(k.max_coresidency_within(40, 51), 7);
        assert_eq!(k.max_coresidency_within(6, 51), 6);
    }

    #[test]
    fn registers_per_thread_count_whole_waves() {
        let l = mi50();
        // 64-thread block, 2048 registers: 32 per lane.
        let k = KernelChar::new(&l, 10, 64, 0, 2048, vec![1000]).unwrap();
        assert_eq!(k.regs_per_thread, 32);
        // A 4-thread block still holds one 64-lane wave: the same 2048
        // registers are 32 per lane, not 512 per thread.
        let k = KernelChar::new(&l, 10, 4, 0, 2048, vec![1000]).unwrap();
        assert_eq!(k.regs_per_thread, 32);
        // 96 threads take two waves (128 lanes).
        let k = KernelChar::new(&l, 10, 96, 0, 4096, vec![1000]).unwrap();
        assert_eq!(k.regs_per_thread, 32);
        // And back: what a block holds with a per-lane allocation, which is
        // what padded launches are sized by.
        assert_eq!(l.block_registers(32, 4), 2048);
        assert_eq!(l.block_registers(32, 64), 2048);
        assert_eq!(l.block_registers(32, 96), 4096);
        assert_eq!(l.lane_registers(l.block_registers(40, 4), 4), 40);
    }

    #[test]
    fn proxy_picks_fewest_registers_that_fit() {
        let p = ProxyKernels::new(&mi50());
        assert_eq!(p.levels(), 10);
        assert_eq!(p.alloc(1), 256);
        assert_eq!(p.alloc(10), 25);
        // 32 regs/thread: level 8 allocates 32.
        assert_eq!(p.pick(32), Some(8));
        // 33 regs: level 7 (36).
        assert_eq!(p.pick(33), Some(7));
        assert_eq!(p.pick(1), Some(10));
        assert_eq!(p.pick(256), Some(1));
        assert_eq!(p.pick(257), None);
    }
}

//! The kernel selection policy of dynamic kernel padding (REEF §5.2, with the
//! multi-version extension of §5.3; Fig. 12 for the CU partition).
//!
//! For one real-time kernel the selector first reserves the CUs the kernel
//! needs ("it first reserves enough CUs for the real-time kernel", Fig. 12
//! lines 1–3): the fewest CUs on which it runs as fast as alone
//! ([`KernelChar::reserved_cus`]: one CU per block for a kernel of fewer
//! blocks than CUs; for `b` blocks on `n` CUs, `ceil(b / ceil(b / n))` CUs
//! holding as many blocks as its busiest CU holds alone, as REEF's
//! implementation partitions them; a kernel whose blocks fill every CU
//! equally is not padded). Then it walks the best-effort task queues
//! greedily, taking blocks for the CUs left over until no CU or no
//! candidate remains. A best-effort kernel is admitted only when
//! - **rule 1**: its block execution time (at the co-residency it will run
//!   at) is shorter than the real-time kernel's execution time, since the
//!   padded kernel lasts as long as its slowest block; and
//! - **rule 2**: the padded kernel, which runs at the minimum occupancy
//!   of its parts (one proxy allocation for all), still gives the
//!   real-time kernel the co-residency it runs at alone on its reserved
//!   CUs. The paper states the rule as "the CU occupancy of best-effort
//!   kernels must be higher than that of the real-time kernel" with that
//!   reason (§5.2); REEF's implementation checks the reason itself: the
//!   merged resources' occupancy against the real-time kernel's
//!   `min_occupancy` (`dynamic_kernel_padding` in SJTU-IPADS/reef
//!   `src/reef/server/scheduler.cpp`, `occupancy_can_merge`). Until issue
//!   28 the literal comparison of the two kernels' own occupancies was
//!   applied as well; it refused best-effort kernels that a real-time
//!   kernel needing one or two blocks per CU leaves ample room for, and
//!   left `reef`'s best-effort client starved in 20 of the 25
//!   `reef-bench dkp` pairs (a task stops at the first kernel no
//!   real-time kernel admits; docs/results-max.md).
//!
//! The padded launch uses one proxy kernel for all its parts
//! ([`ProxyKernels`]): the one with the fewest registers that fulfils the
//! largest per-thread demand, with shared memory sized to the largest
//! demand. Every part's co-residency is checked under that allocation.
//!
//! A task's kernel may be spread over several padded launches by block
//! ranges: [`Candidate::next_block`] is the task's block offset. With several
//! versions of a kernel (§5.3), the shortest kernel (kernel execution time)
//! among the versions that satisfy both rules is taken (with `reef-max`'s
//! `rate`, the one that completes the most of its kernel per CU in the
//! launch, [`super::rate`]); once a kernel has
//! started under a version ([`Candidate::locked`]) its remaining blocks use
//! the shortest of that version and the coarser ones whose block boundary
//! its planned prefix ends on, among those satisfying both rules, and
//! when none does, the shortest version with a multiple of its blocks that
//! does (a finer tiling of the same output): the blocks done convert
//! exactly either way.
//!
//! Selection allocates nothing (the output is reused), so its cost is a few
//! comparisons per candidate version: see `reef-bench dkp --selection`.

use super::profile::{DeviceLimits, KernelChar, ProxyKernels};
use std::ops::Range;

/// One best-effort task's next kernel, offered for padding.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    /// The versions of the task's next kernel (index 0: the default one).
    pub versions: &'a [KernelChar],
    /// The version the kernel is already running under, if it is partly done.
    pub locked: Option<u16>,
    /// Blocks of the (locked) version already assigned to earlier launches.
    /// A part in a finer version starts at `next_block` times its blocks
    /// over the locked version's.
    pub next_block: u32,
    /// The versions of the kernels after this one that a padded launch may
    /// run after it, behind a grid barrier (`reef-max`'s `chain`,
    /// [`super::chain`]); empty: none.
    pub following: &'a [Vec<KernelChar>],
    /// A lower bound of the versions' one-block times, ns
    /// ([`super::floor::first_block_floor`], kept in the padding table):
    /// when it is not below the real-time kernel's time, no version passes
    /// rule 1 and the task is passed over without reading them. 0: no
    /// pre-check.
    pub rule1_floor: u64,
}

/// Best-effort blocks chosen for one padded launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// Index of the candidate (task) in the slice given to [`Selector::select`].
    pub task: usize,
    pub version: u16,
    /// Block range of that version.
    pub blocks: Range<u32>,
    /// Compute units reserved for it.
    pub cus: Range<u32>,
    /// Blocks per CU (the co-residency rule 1 was checked at).
    pub per_cu: u32,
    /// Threads per block of the version (to re-check it under a new proxy).
    pub(super) threads: u32,
    /// More compute units, beside `cus` (a chained part, [`super::chain`]).
    pub extra: Range<u32>,
    /// A chained part: the index in [`Padding::parts`] of the part whose
    /// completion (and a grid barrier) it waits for.
    pub after: Option<usize>,
    /// Which kernel: the candidate's own (0) or one after it (its index in
    /// [`Candidate::following`] plus 1).
    pub ahead: u32,
}

/// A padded launch (Fig. 12): the real-time kernel on CUs `0..rt_cus`, the
/// parts on disjoint ranges of the remaining CUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Padding {
    pub rt_cus: u32,
    /// Proxy kernel level (1-based).
    pub proxy_level: u8,
    /// Registers per thread the proxy allocates to every part.
    pub regs_per_thread: u32,
    /// Dynamic shared memory per block: the largest demand of the parts.
    pub lds: u32,
    pub parts: Vec<Part>,
}

impl Padding {
    pub fn is_padded(&self) -> bool {
        !self.parts.is_empty()
    }
    /// CUs given to best-effort blocks.
    pub fn be_cus(&self) -> u32 {
        self.parts.iter().map(|p| p.cus.len() as u32).sum()
    }
}

/// The selection policy for one device.
#[derive(Debug, Clone)]
pub struct Selector {
    limits: DeviceLimits,
    proxies: ProxyKernels,
    /// Several best-effort blocks per slot, one after the other, within
    /// the real-time kernel's time (`reef-max`'s `waves`, [`super::max`]).
    waves: bool,
    /// Best-effort blocks also on the real-time kernel's own CUs within
    /// this slowdown budget, 1/1000 (`reef-max`'s `share`,
    /// [`super::share`]); 0: off.
    share: u32,
    /// The grid barrier's cost, ns, when padded parts are followed by the
    /// task's next kernels (`reef-max`'s `chain`, [`super::chain`]).
    chain: Option<u64>,
    /// With `waves`, the co-residency that runs the most blocks rather than
    /// the highest (`reef-max`'s `most`, [`super::most`]).
    pub(super) most: bool,
    /// Parts that end their kernel take left-over CUs to end sooner
    /// (`reef-max`'s `spread`, [`super::spread`]).
    pub(super) spread: bool,
    /// The admitted version that completes the most of its kernel per CU
    /// in the launch rather than the shortest kernel (`reef-max`'s
    /// `rate`, [`super::rate`]).
    pub(super) rate: bool,
}

impl Selector {
    pub fn new(limits: DeviceLimits) -> Self {
        Self {
            proxies: ProxyKernels::new(&limits),
            limits,
            waves: false,
            share: 0,
            chain: None,
            most: false,
            spread: false,
            rate: false,
        }
    }

    /// With `Some(barrier_ns)`, a part that ends at its kernel's last block
    /// is followed in the same launch by the task's next kernels offered in
    /// [`Candidate::following`], after a grid barrier of that cost
    /// ([`super::chain`]).
    pub fn with_chain(mut self, barrier_ns: Option<u64>) -> Self {
        self.chain = barrier_ns;
        self
    }

    pub(super) fn waves(&self) -> bool {
        self.waves
    }

    /// Whether padded parts are followed by the task's next kernels
    /// ([`Self::with_chain`]).
    pub fn chains(&self) -> bool {
        self.chain.is_some()
    }

    /// With `budget_permille > 0`, after the CUs left over, best-effort
    /// blocks also go beside the real-time kernel's blocks on its own CUs
    /// where the curves predict its slowdown within that budget
    /// ([`super::share`]).
    pub fn with_share(mut self, budget_permille: u32) -> Self {
        self.share = budget_permille;
        self
    }

    /// With `on`, each slot a part gets (`per_cu` per CU) runs as many of
    /// its blocks one after the other as fit strictly within the real-time
    /// kernel's time (REEF's implementation: `be_iters`, [`super::max`]);
    /// a part then holds more blocks than `cus × per_cu` and is executed
    /// as persistent slots.
    pub fn with_waves(mut self, on: bool) -> Self {
        self.waves = on;
        self
    }

    pub fn limits(&self) -> &DeviceLimits {
        &self.limits
    }

    pub fn proxies(&self) -> &ProxyKernels {
        &self.proxies
    }

    /// Chooses best-effort blocks to pad real-time kernel `rt` with, walking
    /// `cands` from index `start` round robin. Fills `out` (cleared first);
    /// returns whether any block was chosen.
    pub fn select(
        &self,
        rt: &KernelChar,
        cands: &[Candidate<'_>],
        start: usize,
        out: &mut Padding,
    ) -> bool {
        out.parts.clear();
        let n = self.limits.compute_units;
        out.rt_cus = rt.rt_cus.min(n);
        out.lds = rt.lds;
        out.regs_per_thread = rt.regs_per_thread;
        out.proxy_level = self.proxies.pick(rt.regs_per_thread).unwrap_or(0);
        if (out.rt_cus >= n && self.share == 0) || out.proxy_level == 0 || cands.is_empty() {
            return false;
        }
        // The proxy rounds the allocation up to its level: the real-time
        // blocks must still run as fast on their CUs under it.
        let alloc = self.proxies.alloc(out.proxy_level);
        if !self.rt_keeps_its_time(rt, out.rt_cus, rt.lds, alloc) {
            return false;
        }
        let mut free = n.saturating_sub(out.rt_cus);
        let mut next_cu = out.rt_cus;
        let len = cands.len();
        for i in 0..len {
            if free == 0 {
                break;
            }
            let ti = (start + i) % len;
            let c = &cands[ti];
            // A kernel started under a version continues in the shortest
            // of it and the coarser versions its planned prefix ends on a
            // block boundary of, among those that admit; when none does,
            // in the shortest finer version that admits (a multiple of its
            // blocks). Versions tile the output in nested tiles, so every
            // such offset is exact ([`continue_at`], docs/padding.md
            // "Multi-version cost model").
            if c.locked.is_some_and(|v| v as usize >= c.versions.len())
                || c.rule1_floor >= rt.kernel_ns
            {
                continue;
            }
            let locked = c.locked.map(|v| v as usize);
            // (version, per-CU co-residency, kernel time, level, lds, offset)
            let mut best: Option<(u16, u32, u64, u8, u32, u32)> = None;
            for pass in 0..2 {
                if pass == 1 && (locked.is_none() || best.is_some()) {
                    break;
                }
                for v in 0..c.versions.len() {
                    let k = &c.versions[v];
                    let Some(offset) = continue_at(c, locked, pass, v) else {
                        continue;
                    };
                    // Rule 2 is checked below under the proxy allocation
                    // this kernel needs (`rt_keeps_its_time`).
                    // Rule 1 fails at every co-residency (checked again below
                    // at the co-residency chosen; this only saves the work).
                    if k.block_ns(1) >= rt.kernel_ns {
                        continue;
                    }
                    let remaining = k.blocks.saturating_sub(offset);
                    if remaining == 0 {
                        continue;
                    }
                    if let Some(b) = best {
                        if !self.rate && k.kernel_ns >= b.2 {
                            continue;
                        }
                    }
                    let demand = out.regs_per_thread.max(k.regs_per_thread);
                    let lds = out.lds.max(k.lds);
                    let Some(level) = self.proxies.pick(demand) else {
                        continue;
                    };
                    let alloc = self.proxies.alloc(level);
                    let occ = |threads: u32| {
                        self.limits.occupancy(
                            threads,
                            lds,
                            self.limits.block_registers(alloc, threads),
                        )
                    };
                    // The real-time part keeps its time on its CUs; earlier
                    // parts keep their co-residency.
                    if (level != out.proxy_level || lds != out.lds)
                        && (!self.rt_keeps_its_time(rt, out.rt_cus, lds, alloc)
                            || out.parts.iter().any(|p| occ(p.threads) < p.per_cu))
                    {
                        continue;
                    }
                    let cap = occ(k.threads).min(k.occupancy).min(remaining);
                    // Rule 1.
                    let p = k.max_coresidency_within(cap, rt.kernel_ns);
                    if p == 0 {
                        continue;
                    }
                    if let Some(b) = best.filter(|_| self.rate) {
                        let kb = &c.versions[b.0 as usize];
                        if !self.higher_rate(rt.kernel_ns, (k, p), (kb, b.1)) {
                            continue;
                        }
                    }
                    best = Some((v as u16, p, k.kernel_ns, level, lds, offset));
                }
            }
            let Some((v, p, _, level, lds, offset)) = best else {
                continue;
            };
            let k = &c.versions[v as usize];
            let remaining = k.blocks - offset;
            let p = self.most_coresidency(k, p, rt.kernel_ns, remaining, free);
            // Blocks one after the other per slot: their sum stays below
            // the real-time kernel's time (rule 1 for the slot).
            let waves = if self.waves {
                super::most::waves_at(k, p, rt.kernel_ns)
            } else {
                1
            };
            let per_cu_total = p.saturating_mul(waves);
            let nblocks = remaining.min(free.saturating_mul(per_cu_total));
            let cus = nblocks.div_ceil(per_cu_total);
            out.parts.push(Part {
                task: ti,
                version: v,
                blocks: offset..offset + nblocks,
                cus: next_cu..next_cu + cus,
                per_cu: p.min(nblocks),
                threads: k.threads,
                extra: 0..0,
                after: None,
                ahead: 0,
            });
            next_cu += cus;
            free -= cus;
            out.proxy_level = level;
            out.regs_per_thread = self.proxies.alloc(level);
            out.lds = lds;
        }
        if self.spread && free > 0 {
            self.spread(cands, out, &mut free);
        }
        if self.share > 0 {
            super::share::fill(&self.limits, self.waves, self.share, rt, cands, start, out);
        }
        if let Some(barrier_ns) = self.chain {
            self.chain(rt, cands, barrier_ns, out);
        }
        out.is_padded()
    }

    /// Whether real-time kernel `rt` on `cus` CUs, under a proxy giving
    /// `alloc` registers per thread and `lds` bytes of shared memory per
    /// block, runs as fast as alone.
    fn rt_keeps_its_time(&self, rt: &KernelChar, cus: u32, lds: u32, alloc: u32) -> bool {
        let occ = self
            .limits
            .occupancy(
                rt.threads,
                lds,
                self.limits.block_registers(alloc, rt.threads),
            )
            .min(rt.occupancy);
        rt.time_on(cus, occ) <= rt.kernel_ns
    }
}

/// The block offset at which candidate `c` may continue in its version
/// `v`, or `None` when it may not. A kernel not yet started
/// may start in any version. A started one (locked to version `l` of `bl`
/// blocks, `next_block` of them planned) may, in pass 0, continue in `l`
/// or in a coarser version (fewer blocks) whose block boundary the planned prefix ends on
/// (`bl` a multiple `r` of its blocks and `next_block` a multiple of `r`:
/// offset `next_block / r`); in pass 1, when neither admits, in a finer
/// version (its blocks a multiple `r` of `bl`: offset `next_block · r`).
/// Versions tile the same output in nested tiles (docs/padding.md,
/// "Multi-version cost model"), so both conversions are exact.
pub(super) fn continue_at(
    c: &Candidate<'_>,
    locked: Option<usize>,
    pass: u32,
    v: usize,
) -> Option<u32> {
    let Some(l) = locked else {
        return Some(0);
    };
    let (bl, blocks) = (c.versions[l].blocks, c.versions[v].blocks);
    match pass {
        0 if v == l => Some(c.next_block),
        0 if blocks < bl && bl % blocks == 0 => {
            let r = bl / blocks;
            (c.next_block % r == 0).then_some(c.next_block / r)
        }
        1 if blocks > bl && blocks % bl == 0 => Some(c.next_block * (blocks / bl)),
        _ => None,
    }
}

mod explain;
pub use explain::Verdict;

#[cfg(test)]
mod tests;

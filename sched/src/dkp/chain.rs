//! `reef-max`'s `chain` ([`super::max`]): a padded best-effort part that
//! ends at its kernel's last block is followed, in the same padded launch,
//! by the task's next kernel, after a device-wide barrier, on the part's
//! CUs and on CUs the selection left over.
//!
//! Why: a padded launch carries a best-effort task's *next* kernel only
//! (kernel `k + 1` reads what `k` writes, REEF §5.2 pads "the first
//! kernel" of each best-effort queue). When that kernel has few blocks
//! left, or they end long before the real-time kernel, the CUs beside the
//! real-time kernel idle until it ends (docs/results-max.md, "What leaves
//! the beside-RT CUs idle": on DISB B nearly all of it, the single task's
//! dependency chain).
//!
//! How, on hardware: the padded launch is one persistent kernel (REEF
//! §5.1, Fig. 12; `reef-max`'s `waves` already loops its best-effort slots
//! over their blocks); its best-effort slots run kernel `k`'s blocks, meet
//! at a grid-wide barrier, and run kernel `k + 1`'s. The barrier is a
//! cooperative launch's grid synchronisation (CUDA C++ Programming Guide,
//! Cooperative Groups, "Grid Synchronization"; HIP's
//! `hipLaunchCooperativeKernel` and `grid_group::sync`), which needs every
//! block of the launch resident at once: the padded launch's slots are, by
//! construction (`per_cu` slots per CU, each CU's blocks within its
//! occupancy). It needs no CU mask, so it exists on both vendors' GPUs as
//! far as padding itself does. The simulator runs the waiting part as
//! `KernelLaunch::after` (`reef_sim`), the barrier's cost given by the
//! executor (`reef_exec::pad::barrier_ns`).
//!
//! Rules (rule 1 of REEF §5.2 extended to a sequence): the chained part's
//! blocks start after the part before it has ended (its predicted time:
//! its blocks in waves of `per_cu` per CU at the curve's time) and the
//! barrier, and its slowest slot ends strictly within the real-time
//! kernel's time; it runs under the launch's proxy allocation (no part's
//! co-residency and the real-time kernel's time change). Which tasks may
//! chain at all is the caller's ([`Candidate::following`]): the padding
//! scheduler offers only kernels whose re-execution stays correct if the
//! launch is killed (`ModelInfo::successors_clear`).

use super::profile::KernelChar;
use super::select::{Candidate, Padding, Part, Selector};
use std::ops::Range;

/// Predicted time of a part: its blocks in waves of `per_cu` per CU.
pub(super) fn part_ns(k: &KernelChar, blocks: u32, cus: u32, per_cu: u32) -> u64 {
    let slots = (cus as u64 * per_cu as u64).max(1);
    (blocks as u64).div_ceil(slots) * k.block_ns(per_cu)
}

impl Selector {
    /// Appends to `out` the chained parts of every part that ends at its
    /// kernel's last block (see the module doc); `barrier_ns`: the grid
    /// barrier's cost. Returns whether any was added.
    pub(super) fn chain(
        &self,
        rt: &KernelChar,
        cands: &[Candidate<'_>],
        barrier_ns: u64,
        out: &mut Padding,
    ) -> bool {
        let n = self.limits().compute_units;
        // CUs no part holds: after the last primary part's range.
        let mut pool = out
            .parts
            .iter()
            .filter(|p| p.cus.start >= out.rt_cus)
            .map(|p| p.cus.end)
            .max()
            .unwrap_or(out.rt_cus)
            .max(out.rt_cus);
        let alloc = self.proxies().alloc(out.proxy_level);
        let lds = out.lds;
        let base = out.parts.len();
        let mut added = false;
        for i in 0..base {
            let p0 = &out.parts[i];
            // Only parts on CUs of their own (not beside the RT blocks).
            if p0.cus.start < out.rt_cus {
                continue;
            }
            let (task, cus) = (p0.task, p0.cus.clone());
            let c = &cands[task];
            let k0 = &c.versions[p0.version as usize];
            let mut used = part_ns(k0, p0.blocks.len() as u32, cus.len() as u32, p0.per_cu);
            let (mut prev, mut prev_k) = (i, k0);
            let mut extra: Range<u32> = pool..pool;
            for (j, versions) in c.following.iter().enumerate() {
                if out.parts[prev].blocks.end < prev_k.blocks {
                    break;
                }
                let Some(budget) = rt.kernel_ns.checked_sub(used + barrier_ns) else {
                    break;
                };
                // (version, co-residency, blocks, CUs taken, time)
                let mut best: Option<(usize, u32, u32, u32, u64)> = None;
                for (v, k) in versions.iter().enumerate() {
                    if k.regs_per_thread > alloc || k.lds > lds {
                        continue;
                    }
                    let occ = self.limits().occupancy(
                        k.threads,
                        lds,
                        self.limits().block_registers(alloc, k.threads),
                    );
                    let cap = occ.min(k.occupancy).min(k.blocks);
                    let q = k.max_coresidency_within(cap, budget);
                    if q == 0 {
                        continue;
                    }
                    let waves = if self.waves() {
                        ((budget - 1) / k.block_ns(q).max(1)).clamp(1, u32::MAX as u64) as u32
                    } else {
                        1
                    };
                    let per_cu_total = q.saturating_mul(waves);
                    let have = cus.len() as u32 + extra.len() as u32;
                    let need = k.blocks.div_ceil(per_cu_total);
                    let take = need.saturating_sub(have).min(n - pool);
                    let nblocks = k.blocks.min((have + take).saturating_mul(per_cu_total));
                    // Most of the kernel done, then the shortest.
                    let t = part_ns(k, nblocks, have + take, q.min(nblocks));
                    // Most of the kernel done (nblocks / its blocks), then
                    // the shortest.
                    let better = best.is_none_or(|b| {
                        let lhs = nblocks as u64 * versions[b.0].blocks as u64;
                        let rhs = b.2 as u64 * k.blocks as u64;
                        lhs > rhs || (lhs == rhs && t < b.4)
                    });
                    if better {
                        best = Some((v, q, nblocks, take, t));
                    }
                }
                let Some((v, q, nblocks, take, t)) = best else {
                    break;
                };
                extra = extra.start..extra.end + take;
                pool += take;
                out.parts.push(Part {
                    task,
                    version: v as u16,
                    blocks: 0..nblocks,
                    cus: cus.clone(),
                    per_cu: q.min(nblocks),
                    threads: versions[v].threads,
                    extra: extra.clone(),
                    after: Some(prev),
                    ahead: j as u32 + 1,
                });
                added = true;
                used += barrier_ns + t;
                prev = out.parts.len() - 1;
                prev_k = &versions[v];
            }
        }
        added
    }
}

/// Most kernels after kernel `k` (of a model of `kernels` kernels, at most
/// `cap`) a padded launch may chain behind `k`: `L` such that for every
/// `j < L`, the `L - j` kernels after kernel `k + j` write nothing it reads
/// or writes (`successors_clear(k + j) ≥ L - j`,
/// `ModelInfo::successors_clear`). Should the launch be killed, the
/// padding scheduler drops the credit of the kernel the task was in and
/// runs it again from its first block (`PaddingScheduler::rt_finished`):
/// its inputs must still be what they were, whatever of the chained
/// kernels ran, and likewise for each chained kernel before the next.
pub fn chain_len(k: u32, kernels: u32, cap: u32, successors_clear: impl Fn(u32) -> u32) -> u32 {
    let most = kernels.saturating_sub(k + 1).min(cap);
    (1..=most)
        .rev()
        .find(|&l| (0..l).all(|j| successors_clear(k + j) >= l - j))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::super::profile::mi50;
    use super::*;

    fn k(blocks: u32, curve: Vec<u64>) -> KernelChar {
        KernelChar::new(&mi50(), blocks, 256, 0, 65536 / 8, curve).unwrap()
    }

    #[test]
    fn a_part_that_ends_its_kernel_is_followed_by_the_next_on_the_free_cus() {
        // RT kernel: 20 blocks on CUs 0..20, 100 us. The task's kernel has
        // 10 blocks left (10 us each alone, 10 us more per co-resident
        // block), its next kernel 200 blocks of 10 us alone.
        let rt = k(20, vec![100_000]);
        let now = vec![k(40, vec![10_000, 20_000])];
        let next = vec![vec![k(200, vec![10_000, 20_000, 30_000])]];
        let cands = |following| {
            [Candidate {
                versions: &now,
                locked: Some(0),
                next_block: 30,
                following,
                rule1_floor: 0,
            }]
        };
        let plain = Selector::new(mi50()).with_waves(true);
        let mut out = Padding::default();
        assert!(plain.select(&rt, &cands(&next), 0, &mut out));
        // Without the switch the task pads its 10 blocks only (8 co-resident
        // per CU, 80 us, on 2 CUs): 38 CUs idle.
        assert_eq!(out.parts.len(), 1);
        let p = out.parts[0].clone();
        assert_eq!((p.cus.clone(), p.blocks.clone()), (20..22, 30..40));
        let s = Selector::new(mi50())
            .with_waves(true)
            .with_chain(Some(2_000));
        assert!(s.select(&rt, &cands(&next), 0, &mut out));
        assert_eq!(out.parts[0], p);
        assert_eq!(out.parts.len(), 2);
        let c = &out.parts[1];
        assert_eq!((c.task, c.ahead, c.after), (0, 1, Some(0)));
        // After 80 us and the 2 us barrier, 18 us remain: one block of 10
        // us per CU (two co-resident take 20), on the task's 2 CUs and the
        // 38 left over.
        assert_eq!(c.blocks, 0..40);
        assert_eq!(
            (c.cus.clone(), c.extra.clone(), c.per_cu),
            (20..22, 22..60, 1)
        );
        let t = part_ns(&next[0][0], 40, 40, c.per_cu);
        assert_eq!(t, 10_000);
        assert!(80_000 + 2_000 + t < rt.kernel_ns);
        // No chaining onto a kernel the caller does not offer, nor after a
        // part that leaves blocks of its kernel for later.
        assert!(s.select(&rt, &cands(&[]), 0, &mut out));
        assert_eq!(out.parts.len(), 1);
        let many = vec![k(1000, vec![10_000, 20_000])];
        let c = [Candidate {
            versions: &many,
            locked: None,
            next_block: 0,
            following: &next,
            rule1_floor: 0,
        }];
        assert!(s.select(&rt, &c, 0, &mut out));
        assert!(out.parts.iter().all(|p| p.after.is_none()));
        // Nor when the barrier leaves no time.
        let s = Selector::new(mi50())
            .with_waves(true)
            .with_chain(Some(12_000));
        assert!(s.select(&rt, &cands(&next), 0, &mut out));
        assert_eq!(out.parts.len(), 1);
    }

    #[test]
    fn chains_only_over_kernels_whose_successors_leave_them_intact() {
        // successors_clear: kernel 0 → 2, 1 → 1, 2 → 0, 3 → 5.
        let sc = |i: u32| [2, 1, 0, 5, 5, 5][i as usize];
        assert_eq!(chain_len(0, 6, 8, sc), 2);
        assert_eq!(chain_len(1, 6, 8, sc), 1);
        assert_eq!(chain_len(2, 6, 8, sc), 0);
        // Bounded by the model's end and by the cap.
        assert_eq!(chain_len(3, 6, 8, sc), 2);
        assert_eq!(chain_len(3, 6, 1, sc), 1);
        assert_eq!(chain_len(5, 6, 8, sc), 0);
    }
}
